package descriptor_test

import (
	"testing"
	"testing/fstest"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

func TestTune(t *testing.T) {
	fsys := fstest.MapFS{"api.yaml": {Data: []byte(`
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket, burst: 5}
    descriptors:
      - key: endpoint
        value: /search
        rate_limits:
          - {unit: second, requests_per_unit: 2, name: per_second}
          - {unit: day, requests_per_unit: 100, name: per_day, algorithm: fixed_window}
  - key: tier
    rate_limit: {unit: hour, requests_per_unit: 50, algorithm: sliding_window_log}
`)}}
	for _, tt := range []struct {
		name    string
		tune    descriptor.Tune
		entries []descriptor.Entry
		want    []descriptor.Limit // the fields tuned: RequestsPerUnit and Burst
		err     string
	}{
		{name: "requests", tune: descriptor.Tune{Domain: "api", Rule: "api_key", Field: "requests_per_unit", Value: 3},
			entries: []descriptor.Entry{{Key: "api_key", Value: "k"}}, want: []descriptor.Limit{{RequestsPerUnit: 3, Burst: 5}}},
		{name: "burst", tune: descriptor.Tune{Domain: "api", Rule: "api_key", Field: "burst", Value: 0},
			entries: []descriptor.Entry{{Key: "api_key", Value: "k"}}, want: []descriptor.Limit{{RequestsPerUnit: 10}}},
		{name: "named limit", tune: descriptor.Tune{Domain: "api", Rule: "api_key/endpoint=/search", Limit: "per_day", Field: "requests_per_unit", Value: 7},
			entries: []descriptor.Entry{{Key: "api_key", Value: "k"}, {Key: "endpoint", Value: "/search"}},
			want:    []descriptor.Limit{{RequestsPerUnit: 2}, {RequestsPerUnit: 7}}},
		{name: "unknown field", tune: descriptor.Tune{Domain: "api", Rule: "api_key", Field: "unit", Value: 1},
			err: `tune: field "unit" (want requests_per_unit or burst)`},
		{name: "unknown domain", tune: descriptor.Tune{Domain: "web", Rule: "api_key", Field: "burst"},
			err: `tune: no domain "web"`},
		{name: "unknown rule", tune: descriptor.Tune{Domain: "api", Rule: "api_key/endpoint", Field: "burst"},
			err: `tune: domain "api" has no rule "api_key/endpoint" with a limit`},
		{name: "several limits", tune: descriptor.Tune{Domain: "api", Rule: "api_key/endpoint=/search", Field: "requests_per_unit", Value: 1},
			err: `tune: rule "api_key/endpoint=/search" has 2 limits; name one`},
		{name: "unknown limit", tune: descriptor.Tune{Domain: "api", Rule: "api_key", Limit: "per_hour", Field: "burst"},
			err: `tune: rule "api_key" has no limit named "per_hour"`},
		{name: "burst of a window", tune: descriptor.Tune{Domain: "api", Rule: "api_key/endpoint=/search", Limit: "per_day", Field: "burst", Value: 4},
			err: `api.yaml:11: api_key/endpoint=/search: rate_limits[1]: tuned burst applies only to token_bucket, not fixed_window`},
		{name: "log too long", tune: descriptor.Tune{Domain: "api", Rule: "tier", Field: "requests_per_unit", Value: 1 << 30},
			err: `api.yaml:13: tier: rate_limit: tuned requests_per_unit 1073741824: sliding_window_log takes at most 10000`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tree, err := descriptor.LoadFS(fsys, descriptor.Options{Tune: &tt.tune})
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("error = %v, want %s", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := tree.Domain("api").Match(tt.entries)
			if r == nil || len(r.Limits) != len(tt.want) {
				t.Fatalf("rule = %+v", r)
			}
			for i, w := range tt.want {
				if got := r.Limits[i]; got.RequestsPerUnit != w.RequestsPerUnit || got.Burst != w.Burst {
					t.Errorf("limit %d = %d, burst %d; want %d, burst %d", i, got.RequestsPerUnit, got.Burst, w.RequestsPerUnit, w.Burst)
				}
			}
			plain, err := descriptor.LoadFS(fsys, descriptor.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if plain.Hash() == tree.Hash() {
				t.Error("a tuned tree has the hash of the untuned one")
			}
		})
	}
}
