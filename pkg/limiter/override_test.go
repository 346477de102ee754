package limiter

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/metrictest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/override"
)

const overrideYAML = `
domain: api
descriptors:
  - key: tenant
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window, name: per_path}
  - key: two
    rate_limits:
      - {unit: minute, requests_per_unit: 4, algorithm: token_bucket, burst: 2, name: short}
      - {unit: hour, requests_per_unit: 100, algorithm: fixed_window, name: long}
  - key: free
    rate_limit: {unlimited: true}
---
domain: other
descriptors:
  - key: tenant
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
`

// overrides is a settable snapshot of overrides for a limiter.
type overrides struct{ set atomic.Pointer[override.Set] }

func (o *overrides) current() *override.Set { return o.set.Load() }

func (o *overrides) use(list ...override.Override) { o.set.Store(override.NewSet(list)) }

// ov returns an override of domain api on the entries, expiring a minute
// after t0.
func ov(id string, kv []string, limit *override.Limit, mult float64) override.Override {
	return override.Override{ID: id, Domain: "api", Entries: entries(kv...), Limit: limit, Multiplier: mult, ExpiresAt: t0.Add(time.Minute), CreatedAt: t0}
}

func newOverrideFixture(t *testing.T) (*fixture, *overrides) {
	t.Helper()
	ovs := &overrides{}
	return newFixture(t, overrideYAML, func(o *Options) { o.Overrides = ovs.current }), ovs
}

// TestOverrideLimits checks which override applies to a descriptor (the
// longest prefix of its entries, in its domain, not expired) and the
// limits it makes: an absolute limit counted with the rule's first
// limit's algorithm, or the rule's limits multiplied, rounded down and at
// least 1.
func TestOverrideLimits(t *testing.T) {
	tenant := ov("t", d("tenant=acme"), nil, 2)
	path := ov("p", d("tenant=acme", "path=/x"), &override.Limit{RequestsPerUnit: 3, Unit: "hour"}, 0)
	two := ov("two", d("two=k"), nil, 2.5)
	tiny := ov("tiny", d("tenant=tiny"), nil, 0.01)
	expired := ov("old", d("tenant=gone"), nil, 5)
	expired.ExpiresAt = t0
	perPath := descriptor.Limit{Name: "per_path", Unit: descriptor.Minute, UnitMultiplier: 1, RequestsPerUnit: 10, Algorithm: algorithm.FixedWindow}
	tests := []struct {
		name string
		req  *Request
		want []descriptor.Limit // the limits of the descriptor's status, by hit
	}{
		{"the longest prefix", req("api", d("tenant=acme", "path=/x")), []descriptor.Limit{
			{Name: "override:p", Unit: descriptor.Hour, UnitMultiplier: 1, RequestsPerUnit: 3, Algorithm: algorithm.FixedWindow}}},
		{"a shorter prefix", req("api", d("tenant=acme", "path=/y")), []descriptor.Limit{
			{Name: "override:t", Unit: descriptor.Minute, UnitMultiplier: 1, RequestsPerUnit: 20, Algorithm: algorithm.FixedWindow}}},
		{"no prefix", req("api", d("tenant=other", "path=/x")), []descriptor.Limit{perPath}},
		{"another domain", req("other", d("tenant=acme", "path=/x")), []descriptor.Limit{
			{Unit: descriptor.Minute, UnitMultiplier: 1, RequestsPerUnit: 10, Algorithm: algorithm.FixedWindow}}},
		{"expired", req("api", d("tenant=gone", "path=/x")), []descriptor.Limit{perPath}},
		{"at least 1", req("api", d("tenant=tiny", "path=/x")), []descriptor.Limit{
			{Name: "override:tiny", Unit: descriptor.Minute, UnitMultiplier: 1, RequestsPerUnit: 1, Algorithm: algorithm.FixedWindow}}},
		{"every limit multiplied", req("api", d("two=k")), []descriptor.Limit{
			{Name: "override:two", Unit: descriptor.Minute, UnitMultiplier: 1, RequestsPerUnit: 10, Burst: 5, Algorithm: algorithm.TokenBucket},
			{Name: "override:two", Unit: descriptor.Hour, UnitMultiplier: 1, RequestsPerUnit: 250, Algorithm: algorithm.FixedWindow}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ovs := newOverrideFixture(t)
			ovs.use(tenant, path, two, tiny, expired)
			resp := f.check(t, tt.req)
			if len(f.store.batches) != 1 || len(f.store.batches[0]) != len(tt.want) {
				t.Fatalf("batches %+v, want one of %d hits", f.store.batches, len(tt.want))
			}
			for i, w := range tt.want {
				if got := f.store.batches[0][i].Limit; got != w.Algo() {
					t.Errorf("hit %d counted against %+v, want %+v", i, got, w.Algo())
				}
			}
			st := resp.Statuses[0]
			if st.Limit == nil || st.Limit.Name != tt.want[0].Name {
				t.Errorf("status limit %+v, want the name %q", st.Limit, tt.want[0].Name)
			}
			if st.Rule == nil {
				t.Error("status has no rule: an override changes the limit, not the rule that decided")
			}
		})
	}
}

// TestOverrideMidWindow checks that an override changes the limit, not
// the counter: raising it mid-window admits the difference, lowering it
// rejects at once, and it stops applying at its expiry.
func TestOverrideMidWindow(t *testing.T) {
	f, ovs := newOverrideFixture(t)
	r := req("api", d("tenant=acme", "path=/x"))
	expect := func(step string, want Code, remaining uint32) {
		t.Helper()
		resp := f.check(t, r)
		if got := resp.Statuses[0]; got.Code != want || got.Remaining != remaining {
			t.Fatalf("%s: %s, want %v with %d remaining", step, fmtStatus(got), want, remaining)
		}
	}
	for i := range 10 {
		expect("within the rule", OK, uint32(9-i))
	}
	expect("over the rule", OverLimit, 0)
	ovs.use(ov("x2", d("tenant=acme"), nil, 2))
	for i := range 10 {
		expect("raised", OK, uint32(9-i))
	}
	expect("over the raised limit", OverLimit, 0)
	ovs.use(ov("low", d("tenant=acme", "path=/x"), &override.Limit{RequestsPerUnit: 5, Unit: "minute"}, 0))
	expect("lowered", OverLimit, 0)

	x3 := ov("x3", d("tenant=acme"), nil, 3)
	x3.ExpiresAt = t0.Add(40 * time.Second) // the window ends at t0 + 50 s
	ovs.use(x3)
	expect("raised again", OK, 9)
	f.clock.Set(x3.ExpiresAt.Add(-time.Microsecond))
	expect("just before the expiry", OK, 8)
	f.clock.Set(x3.ExpiresAt)
	expect("at the expiry", OverLimit, 0)
}

// TestOverrideOnEnvoyOverride checks how an operator's override combines
// with Envoy's per-descriptor limit override: it applies to what Envoy's
// override set, multiplying it or replacing it.
func TestOverrideOnEnvoyOverride(t *testing.T) {
	f, ovs := newOverrideFixture(t)
	ovs.use(ov("x2", d("tenant=acme"), nil, 2))
	r := req("api", d("tenant=acme", "path=/x"))
	r.Descriptors[0].Override = &Override{RequestsPerUnit: 5, Unit: descriptor.Hour}
	resp := f.check(t, r)
	got := resp.Statuses[0].Limit
	if got == nil || got.RequestsPerUnit != 10 || got.Unit != descriptor.Hour || got.Name != "override:x2" {
		t.Fatalf("limit %+v, want Envoy's 5 per hour doubled, named override:x2", got)
	}
}

// TestOverrideNotOnUncounted checks that an override leaves alone the
// descriptors that are not counted.
func TestOverrideNotOnUncounted(t *testing.T) {
	f, ovs := newOverrideFixture(t)
	ovs.use(ov("free", d("free=1"), &override.Limit{RequestsPerUnit: 1, Unit: "hour"}, 0))
	for range 3 {
		if resp := f.check(t, req("api", d("free=1"))); resp.Code != OK || resp.Statuses[0].Remaining != Unlimited {
			t.Fatalf("unlimited descriptor: %s", fmtStatus(resp.Statuses[0]))
		}
	}
}

// TestResetWithOverride checks that a reset under an absolute override
// with its own period clears both its counter and the rule's.
func TestResetWithOverride(t *testing.T) {
	f, ovs := newOverrideFixture(t)
	r := req("api", d("tenant=acme", "path=/x"))
	expect := func(step string, want Code, remaining uint32) {
		t.Helper()
		if got := f.check(t, r).Statuses[0]; got.Code != want || got.Remaining != remaining {
			t.Fatalf("%s: %s, want %v with %d remaining", step, fmtStatus(got), want, remaining)
		}
	}
	expect("under the rule", OK, 9)
	h := ov("h", d("tenant=acme"), &override.Limit{RequestsPerUnit: 1, Unit: "hour"}, 0)
	ovs.use(h)
	expect("under the override", OK, 0)
	expect("over the override", OverLimit, 0)
	got, err := f.lim.Reset(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Limit.Name != "override:h" || got[1].Limit.Name != "per_path" {
		t.Fatalf("Reset = %+v, want the override's counter and the rule's", got)
	}
	expect("the override's counter after the reset", OK, 0)
	ovs.use()
	expect("the rule's counter after the reset", OK, 9)
}

// BenchmarkCheckOverrides measures one descriptor's decision without an
// override registry (as before overrides existed), with an empty one (as
// the app runs), with overrides of other clients only, and overridden.
// With -count the cases interleave, for ratios within one run.
func BenchmarkCheckOverrides(b *testing.B) {
	other := override.Override{ID: "o", Domain: "api", Entries: []descriptor.Entry{{Key: "client", Value: "c2"}}, Multiplier: 2, ExpiresAt: t0.Add(time.Hour)}
	mine := other
	mine.ID, mine.Entries = "m", []descriptor.Entry{{Key: "client", Value: "c1"}}
	cases := []struct {
		name string
		opts func(*Options)
	}{
		{"no registry", nil},
		{"none", func(o *Options) { o.Overrides = (&overrides{}).current }},
		{"others", func(o *Options) { ovs := &overrides{}; ovs.use(other); o.Overrides = ovs.current }},
		{"overridden", func(o *Options) { ovs := &overrides{}; ovs.use(other, mine); o.Overrides = ovs.current }},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			f := newFixture(b, benchYAML, bc.opts)
			f.store.inner, f.lim.store = nil, f.store.inner
			r := req("api", d("client=c1"))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.lim.Check(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestEnvoyLimitPastTheAlgorithm sends an Envoy limit override that would
// take a sliding-window log past its bound: the rule's own limit decides,
// and the case is counted, and logged once.
func TestEnvoyLimitPastTheAlgorithm(t *testing.T) {
	const yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window_log, name: log}\n"
	var logs logtest.Buffer
	mp, metric := metrictest.New(t)
	f := newFixture(t, yaml, func(o *Options) {
		o.Logger, o.MeterProvider = slog.New(slog.NewTextHandler(&logs, nil)), mp
	})
	req := &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("k=v"), Override: &Override{RequestsPerUnit: 50_000, Unit: descriptor.Minute}}}}
	var codes []Code
	for range 3 {
		st := f.check(t, req).Statuses[0]
		if st.Limit == nil || st.Limit.Name != "log" {
			t.Fatalf("limit %+v, want the rule's own, log", st.Limit)
		}
		codes = append(codes, st.Code)
	}
	if want := []Code{OK, OK, OverLimit}; !reflect.DeepEqual(codes, want) {
		t.Errorf("codes %v, want %v (the rule's 2 a minute)", codes, want)
	}
	if n := metric("tollgate_envoy_limits_ignored"); n != 3 {
		t.Errorf("tollgate_envoy_limits_ignored = %d, want 3", n)
	}
	if n := strings.Count(logs.String(), "an Envoy limit override the algorithms cannot take is ignored"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs.String())
	}
}
