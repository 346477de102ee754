package xds_test

import (
	"errors"
	"reflect"
	"testing"
	"testing/fstest"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/xds"
)

// anyOf packs resources as the server sends them.
func anyOf(t testing.TB, cfgs ...*rlsconfv3.RateLimitConfig) []*anypb.Any {
	t.Helper()
	out := make([]*anypb.Any, len(cfgs))
	for i, c := range cfgs {
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = a
	}
	return out
}

// perMinute is a RateLimitConfig for domain with one descriptor key=value
// limited to n a minute.
func perMinute(name, domain, key, value string, n uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: name, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: key, Value: value,
		RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n},
	}}}
}

func TestRenderEveryField(t *testing.T) {
	cfg := &rlsconfv3.RateLimitConfig{
		Name: "default/eg/http", Domain: "eg",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{
				Key: "rule-0", Value: "*",
				Descriptors: []*rlsconfv3.RateLimitDescriptor{{
					Key: "user",
					RateLimit: &rlsconfv3.RateLimitPolicy{
						Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 10, Name: "per-user",
						Replaces: []*rlsconfv3.RateLimitReplace{{Name: "global"}},
					},
				}},
			},
			{
				Key: "rule-1", Value: "a: b", ShadowMode: true, QuotaMode: true, DetailedMetric: true,
				RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_WEEK, RequestsPerUnit: 5, Name: "global"},
				Metadata:  mustStruct(t, map[string]any{"yes": "yes", "n": 3, "nested": map[string]any{"on": []any{true, nil, 1.5}}}),
			},
			{Key: "vip", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
		},
	}
	fsys, err := xds.Render(anyOf(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	const want = `domain: eg
descriptors:
    - key: rule-0
      value: '*'
      descriptors:
        - key: user
          rate_limit:
            unit: hour
            requests_per_unit: 10
            name: per-user
            replaces:
                - name: global
    - key: rule-1
      value: 'a: b'
      rate_limit:
        unit: week
        requests_per_unit: 5
        name: global
      shadow_mode: true
      quota_mode: true
      detailed_metric: true
      metadata:
        "n": 3
        "nested":
            "on":
                - true
                - null
                - 1.5
        "yes": "yes"
    - key: vip
      rate_limit:
        unlimited: true
`
	f, ok := fsys["xds/default_eg_http.yaml"]
	if !ok || len(fsys) != 1 {
		t.Fatalf("Render gave files %v, want xds/default_eg_http.yaml alone", keys(fsys))
	}
	if got := string(f.Data); got != want {
		t.Fatalf("Render gave\n%s\nwant\n%s", got, want)
	}
	tree, err := descriptor.LoadFS(fsys, descriptor.Options{})
	if err != nil {
		t.Fatalf("the rendered file does not load: %v", err)
	}
	rule := tree.Domain("eg").Match([]descriptor.Entry{{Key: "rule-0", Value: "x"}, {Key: "user", Value: "u"}})
	if rule == nil || len(rule.Limits) != 1 || rule.Limits[0].RequestsPerUnit != 10 || rule.Limits[0].Name != "per-user" || len(rule.Replaces) != 1 || rule.Replaces[0] != "global" {
		t.Fatalf("rule-0/user matched %+v, want per-user, 10 an hour, replacing global", rule)
	}
	rule = tree.Domain("eg").Match([]descriptor.Entry{{Key: "rule-1", Value: "a: b"}})
	if rule == nil || !rule.ShadowMode || !rule.QuotaMode || !rule.DetailedMetric || rule.Limits[0].Unit != descriptor.Week {
		t.Fatalf("rule-1 matched %+v, want shadow mode, quota mode, a detailed metric and 5 a week", rule)
	}
	if want := cfg.Descriptors[1].Metadata.AsMap(); !reflect.DeepEqual(rule.Metadata, want) {
		t.Fatalf("rule-1's metadata is %#v, want %#v", rule.Metadata, want)
	}
	if rule := tree.Domain("eg").Match([]descriptor.Entry{{Key: "vip", Value: "x"}}); rule == nil || !rule.Unlimited {
		t.Fatalf("vip matched %+v, want unlimited", rule)
	}
}

// mustStruct returns m as a Struct.
func mustStruct(t testing.TB, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func keys(m fstest.MapFS) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestBuildErrors(t *testing.T) {
	withUnknown := func() []*anypb.Any {
		res := anyOf(t, perMinute("r", "d", "k", "v", 1))
		// Field 99 of the inner RateLimitPolicy, as a newer control plane
		// might send: rebuild the descriptor bytes with it appended.
		cfg := perMinute("r", "d", "k", "v", 1)
		policy, _ := proto.Marshal(cfg.Descriptors[0].RateLimit)
		policy = protowire.AppendTag(policy, 99, protowire.VarintType)
		policy = protowire.AppendVarint(policy, 1)
		desc := cfg.Descriptors[0]
		desc.RateLimit = nil
		db, _ := proto.Marshal(desc)
		db = protowire.AppendTag(db, 3, protowire.BytesType)
		db = protowire.AppendBytes(db, policy)
		cfg.Descriptors = nil
		cb, _ := proto.Marshal(cfg)
		cb = protowire.AppendTag(cb, 3, protowire.BytesType)
		cb = protowire.AppendBytes(cb, db)
		res[0].Value = cb
		return res
	}
	badUnit := perMinute("bad-unit", "d", "k", "v", 1)
	badUnit.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	dup := perMinute("dup", "d", "k", "v", 1)
	dup.Descriptors = append(dup.Descriptors, dup.Descriptors[0])
	wrongType, _ := anypb.New(&rlsconfv3.RateLimitReplace{Name: "x"})

	for _, tc := range []struct {
		name      string
		resources []*anypb.Any
		want      string
		is        error
	}{
		{
			name:      "unknown field",
			resources: withUnknown(),
			want:      "resource 0: unsupported resource: r.descriptors[0].rate_limit has a field this version of tollgate does not know",
			is:        xds.ErrUnsupported,
		},
		{
			name:      "wrong type",
			resources: []*anypb.Any{wrongType},
			want:      `resource 0: unsupported resource: type "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitReplace", want "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"`,
			is:        xds.ErrUnsupported,
		},
		{
			name:      "same file name",
			resources: anyOf(t, perMinute("a/b", "d1", "k", "v", 1), perMinute("a_b", "d2", "k", "v", 1)),
			want:      `resources "a/b" and "a_b": both map to xds/a_b.yaml; resource names must differ`,
		},
		{
			name:      "bad unit",
			resources: anyOf(t, badUnit),
			want:      `xds/bad-unit.yaml:6: k=v: rate_limit: unknown unit "unknown" (want second, minute, hour, day, week, month or year)`,
		},
		{
			name:      "duplicate descriptor",
			resources: anyOf(t, dup),
			want:      `xds/dup.yaml:8: k=v: duplicate descriptor (first at line 3)`,
		},
		{
			name:      "same domain twice",
			resources: anyOf(t, perMinute("one", "d", "k", "v", 1), perMinute("two", "d", "k", "w", 1)),
			want:      `xds/two.yaml:1: domain "d" is already defined in xds/one.yaml`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := xds.Build(tc.resources, descriptor.Options{})
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Build() = %v, %v; want error\n%s", tree, err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Build() error %v is not %v", err, tc.is)
			}
		})
	}
}

// TestGeneratedRules builds rules shaped exactly as Envoy Gateway v1.9
// (internal/xds/translator's testdata/out/ratelimit-config/
// month-year-rule.yaml, and the Week its API allows) and Envoy AI
// Gateway's QuotaPolicy (internal/ratelimit/translator: a backend, per
// model bucket rules nested by header, a default bucket and a service
// quota, every leaf in quota mode, one in shadow mode) generate them.
func TestGeneratedRules(t *testing.T) {
	limit := func(n uint32, u rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitPolicy {
		return &rlsconfv3.RateLimitPolicy{RequestsPerUnit: n, Unit: u}
	}
	route := func(name string, n uint32, u rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitDescriptor {
		return &rlsconfv3.RateLimitDescriptor{Key: name, Value: name, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "rule-0-match-0", Value: "rule-0-match-0", RateLimit: limit(n, u),
		}}}
	}
	gateway := &rlsconfv3.RateLimitConfig{Name: "first-listener", Domain: "first-listener", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		route("first-route", 5, rlsconfv3.RateLimitUnit_MONTH),
		route("second-route", 1, rlsconfv3.RateLimitUnit_YEAR),
		route("third-route", 3, rlsconfv3.RateLimitUnit_WEEK),
	}}
	const premium, user, fallback = "rule-0-x-api-key|premium-match-0", "rule-1-x-user-id-match-0", "rule-2-match--1"
	quota := &rlsconfv3.RateLimitConfig{Name: "ai-gateway-quota", Domain: "ai-gateway-quota", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "backend_name", Value: "default/openai",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "model_name_override", Value: "gpt-4", Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: premium, Value: premium, RateLimit: limit(100, rlsconfv3.RateLimitUnit_HOUR), ShadowMode: true, QuotaMode: true},
				{Key: user, RateLimit: limit(10, rlsconfv3.RateLimitUnit_MINUTE), QuotaMode: true},
				{Key: fallback, Value: fallback, RateLimit: limit(1000, rlsconfv3.RateLimitUnit_DAY), QuotaMode: true},
			}},
			{Key: "model_name_override", RateLimit: limit(50, rlsconfv3.RateLimitUnit_MINUTE), QuotaMode: true},
		},
	}}}
	tree, err := xds.Build(anyOf(t, gateway, quota), descriptor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		domain  string
		entries []string
		n       uint32
		unit    descriptor.Unit
		quota   bool
		shadow  bool
	}{
		{"first-listener", []string{"first-route", "first-route", "rule-0-match-0", "rule-0-match-0"}, 5, descriptor.Month, false, false},
		{"first-listener", []string{"second-route", "second-route", "rule-0-match-0", "rule-0-match-0"}, 1, descriptor.Year, false, false},
		{"first-listener", []string{"third-route", "third-route", "rule-0-match-0", "rule-0-match-0"}, 3, descriptor.Week, false, false},
		{"ai-gateway-quota", []string{"backend_name", "default/openai", "model_name_override", "gpt-4", premium, premium}, 100, descriptor.Hour, true, true},
		{"ai-gateway-quota", []string{"backend_name", "default/openai", "model_name_override", "gpt-4", user, "alice"}, 10, descriptor.Minute, true, false},
		{"ai-gateway-quota", []string{"backend_name", "default/openai", "model_name_override", "gpt-4", fallback, fallback}, 1000, descriptor.Day, true, false},
		{"ai-gateway-quota", []string{"backend_name", "default/openai", "model_name_override", "claude"}, 50, descriptor.Minute, true, false},
	} {
		var entries []descriptor.Entry
		for i := 0; i+1 < len(c.entries); i += 2 {
			entries = append(entries, descriptor.Entry{Key: c.entries[i], Value: c.entries[i+1]})
		}
		rule := tree.Domain(c.domain).Match(entries)
		if rule == nil || len(rule.Limits) != 1 || rule.Limits[0].RequestsPerUnit != c.n || rule.Limits[0].Unit != c.unit ||
			rule.QuotaMode != c.quota || rule.ShadowMode != c.shadow {
			t.Errorf("%s %v matched %+v, want %d per %v, quota mode %v, shadow mode %v", c.domain, c.entries, rule, c.n, c.unit, c.quota, c.shadow)
		}
	}
}
