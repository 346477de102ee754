package limiter

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// Clear clears in the recorder's store.
func (r *recorder) Clear(ctx context.Context, counters []store.Hit) error {
	return r.inner.(store.Clearer).Clear(ctx, counters)
}

const resetYAML = `
domain: api
descriptors:
  - key: alg
    value: token_bucket
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token_bucket}
  - key: alg
    value: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
  - key: alg
    value: sliding_window_counter
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window_counter}
  - key: alg
    value: sliding_window_log
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window_log}
  - key: two
    rate_limits:
      - {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
      - {unit: hour, requests_per_unit: 2, algorithm: token_bucket}
  - key: free
    rate_limit: {unlimited: true}
  - key: banned
    action: deny
`

// TestReset checks that a reset lets a client whose limit is exhausted
// through at once, for every algorithm and for a rule of two limits, and
// that it names every counter it cleared.
func TestReset(t *testing.T) {
	tests := []struct {
		name string
		desc []string
		want int // counters cleared
	}{
		{"token bucket", d("alg=token_bucket"), 1},
		{"fixed window", d("alg=fixed_window"), 1},
		{"sliding-window counter", d("alg=sliding_window_counter"), 1},
		{"sliding-window log", d("alg=sliding_window_log"), 1},
		{"two limits", d("two=x"), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var told []store.Hit
			f := newFixture(t, resetYAML, func(o *Options) {
				o.OnReset = func(_ context.Context, c []store.Hit) { told = c }
			})
			r := req("api", tt.desc)
			for range 2 {
				if resp := f.check(t, r); resp.Code != OK {
					t.Fatalf("a hit within the limit: %v", resp.Code)
				}
			}
			if resp := f.check(t, r); resp.Code != OverLimit {
				t.Fatalf("the third hit: %v, want OVER_LIMIT", resp.Code)
			}
			got, err := f.lim.Reset(context.Background(), r)
			if err != nil {
				t.Fatalf("Reset: %v", err)
			}
			rule := f.lim.tree().Domain("api").Match(entries(tt.desc...))
			var want []ResetCounter
			for i := range rule.Limits {
				want = append(want, ResetCounter{Descriptor: 0, Rule: rule, Limit: &rule.Limits[i]})
			}
			if len(want) != tt.want || !reflect.DeepEqual(got, want) {
				t.Errorf("Reset = %+v, want %+v", got, want)
			}
			if len(told) != tt.want {
				t.Errorf("OnReset got %d counters, want %d", len(told), tt.want)
			}
			for i := range 2 {
				resp := f.check(t, r)
				if resp.Code != OK {
					t.Fatalf("hit %d after the reset: %v, want OK", i+1, resp.Code)
				}
				if want := uint32(1 - i); resp.Statuses[0].Remaining != want {
					t.Errorf("hit %d after the reset: remaining %d, want %d", i+1, resp.Statuses[0].Remaining, want)
				}
			}
		})
	}
}

// TestResetOnlyCounted checks what Reset does with descriptors that count
// nothing and with requests it must refuse.
func TestResetOnlyCounted(t *testing.T) {
	f := newFixture(t, resetYAML, nil)
	tests := []struct {
		name    string
		req     *Request
		want    []ResetCounter
		wantErr error
	}{
		{"unknown domain", req("nope", d("alg=fixed_window")), nil, nil},
		{"unmatched, unlimited and deny-listed", req("api", d("other=1"), d("free=1"), d("banned=1")), nil, nil},
		{"the second descriptor counted", req("api", d("free=1"), d("alg=fixed_window")), []ResetCounter{{Descriptor: 1}}, nil},
		{"the same counter twice", req("api", d("alg=fixed_window"), d("alg=fixed_window")), []ResetCounter{{Descriptor: 0}}, nil},
		{"no descriptors", &Request{Domain: "api"}, nil, ErrInvalidRequest},
		{"empty key", &Request{Domain: "api", Descriptors: []Descriptor{{Entries: []descriptor.Entry{{Value: "x"}}}}}, nil, ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := f.lim.Reset(context.Background(), tt.req)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Reset error = %v, want %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Reset = %+v, want %d counters", got, len(tt.want))
			}
			for i := range got {
				if got[i].Descriptor != tt.want[i].Descriptor || got[i].Limit == nil || got[i].Rule == nil {
					t.Errorf("Reset[%d] = %+v, want descriptor %d with its rule and limit", i, got[i], tt.want[i].Descriptor)
				}
			}
		})
	}
}

// applyOnly is a store that cannot clear.
type applyOnly struct{ store.Store }

func (a applyOnly) Apply(ctx context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	return a.Store.Apply(ctx, hits, verdicts)
}

func TestResetCannotClear(t *testing.T) {
	f := newFixture(t, resetYAML, nil)
	f.lim.store = applyOnly{f.store.inner}
	_, err := f.lim.Reset(context.Background(), req("api", d("alg=fixed_window")))
	if !errors.Is(err, ErrCannotReset) || !errors.Is(err, store.ErrCannotClear) {
		t.Fatalf("Reset error = %v, want %v", err, ErrCannotReset)
	}
}

// TestResetEnvoyOverride checks that a reset clears the counter an Envoy
// limit override counts against, which is the override's own.
func TestResetEnvoyOverride(t *testing.T) {
	f := newFixture(t, resetYAML, nil)
	r := req("api", d("alg=fixed_window"))
	r.Descriptors[0].Override = &Override{RequestsPerUnit: 1, Unit: descriptor.Hour}
	f.check(t, r)
	if resp := f.check(t, r); resp.Code != OverLimit {
		t.Fatalf("over the override: %v", resp.Code)
	}
	got, err := f.lim.Reset(context.Background(), r)
	if err != nil || len(got) != 1 || got[0].Limit.Unit != descriptor.Hour {
		t.Fatalf("Reset = %+v, %v; want the override's hourly counter", got, err)
	}
	if resp := f.check(t, r); resp.Code != OK {
		t.Fatalf("after the reset: %v, want OK", resp.Code)
	}
}

// TestResetForgivesPenalty checks that a reset ends a client's penalty as
// well as its count: the client is admitted at once.
func TestResetForgivesPenalty(t *testing.T) {
	f := newFixture(t, penaltyYAML, nil)
	r := req("api", d("client=c1"))
	for i, want := range []Code{OK, OK, OverLimit} {
		if resp := f.check(t, r); resp.Code != want {
			t.Fatalf("hit %d: %v, want %v", i, resp.Code, want)
		}
	}
	if resp := f.check(t, r); !resp.Statuses[0].Penalized {
		t.Fatalf("a hit within Retry-After: %+v, want penalized", resp.Statuses[0])
	}
	if _, err := f.lim.Reset(context.Background(), r); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if resp := f.check(t, r); resp.Code != OK {
		t.Fatalf("after Reset: %+v, want OK", resp.Statuses[0])
	}
}
