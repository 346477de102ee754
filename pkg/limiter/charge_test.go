package limiter

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// chargeYAML has admitted and always-charged rules. tenant/path shares the
// counter of every /api/ path and forms the hash tag from tenant, so that a
// marker that shifted the entries would show in the counter's entries, its
// shard or the rule matched.
const chargeYAML = `
domain: api
shard_by: tenant
descriptors:
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window, name: tokens}
  - key: reported
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window, charge: always, name: reported}
  - key: small
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: big
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
  - key: both
    rate_limits:
      - {unit: minute, requests_per_unit: 10, algorithm: fixed_window, charge: always}
      - {unit: hour, requests_per_unit: 100, algorithm: fixed_window}
  - key: plan
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: bad
    action: deny
  - key: tenant
    descriptors:
      - key: path
        value: "/api/*"
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
---
domain: defaults
defaults:
  charge: always
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: own
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window, charge: admitted}
`

// marked returns the descriptor of kv with a ChargeKey entry inserted at
// position at, and cost hits.
func marked(at int, cost uint64, kv ...string) Descriptor {
	es := entries(kv...)
	es = append(es[:at:at], append([]descriptor.Entry{{Key: ChargeKey, Value: ChargeAlwaysValue}}, es[at:]...)...)
	return Descriptor{Entries: es, Hits: cost, HasHits: true}
}

// costly returns the descriptor of kv with cost hits.
func costly(cost uint64, kv ...string) Descriptor {
	return Descriptor{Entries: entries(kv...), Hits: cost, HasHits: true}
}

// probe returns the remaining of the counter of kv without charging it.
func (f *fixture) probe(t *testing.T, kv ...string) (Code, uint32) {
	t.Helper()
	resp := f.check(t, &Request{Domain: "api", Descriptors: []Descriptor{costly(0, kv...)}})
	return resp.Statuses[0].Code, resp.Statuses[0].Remaining
}

// TestCheckChargeMarker checks that a ChargeKey entry, first, in the
// middle or last, is removed before matching and before the counter is
// named: the hit is the one of the descriptor without it, charged always,
// and it counts in that descriptor's counter.
func TestCheckChargeMarker(t *testing.T) {
	tests := []struct {
		name string
		kv   []string
		at   int
	}{
		{"one entry, marker first", []string{"tokens=u1"}, 0},
		{"one entry, marker last", []string{"tokens=u1"}, 1},
		{"shared nested rule, marker first", []string{"tenant=t1", "path=/api/x"}, 0},
		{"shared nested rule, marker in the middle", []string{"tenant=t1", "path=/api/x"}, 1},
		{"shared nested rule, marker last", []string{"tenant=t1", "path=/api/x"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plain := newFixture(t, chargeYAML, nil)
			wantResp := plain.check(t, &Request{Domain: "api", Descriptors: []Descriptor{costly(3, tt.kv...)}})
			want := plain.store.batches[0]
			want[0].Limit.Charge = algorithm.ChargeAlways

			f := newFixture(t, chargeYAML, nil)
			resp := f.check(t, &Request{Domain: "api", Descriptors: []Descriptor{marked(tt.at, 3, tt.kv...)}})
			if got := f.store.batches[0]; !reflect.DeepEqual(got, want) {
				t.Errorf("hits:\n got %+v\nwant %+v", got, want)
			}
			assertResponse(t, resp, wantResp)
			// The same counter: a check without the marker sees the cost.
			if code, rem := f.probe(t, tt.kv...); code != OK || rem != 7 {
				t.Errorf("probe without the marker = %v, %d left; want OK, 7 left", code, rem)
			}
		})
	}
}

// TestCheckChargeOfHits checks the charge of every hit: the limit's own,
// else its domain's defaults, else the tree's default, and always for a
// marked descriptor whatever the limit says.
func TestCheckChargeOfHits(t *testing.T) {
	admitted, always := algorithm.ChargeAdmitted, algorithm.ChargeAlways
	tests := []struct {
		name          string
		treeDefault   algorithm.Charge
		domain        string
		desc          Descriptor
		want          []algorithm.Charge
		wantPastLimit bool
	}{
		{name: "admitted by default", domain: "api", desc: costly(1, "tokens=u"), want: []algorithm.Charge{admitted}},
		{name: "the limit's charge", domain: "api", desc: costly(1, "reported=u"), want: []algorithm.Charge{always}},
		{name: "each limit its own", domain: "api", desc: costly(1, "both=u"), want: []algorithm.Charge{always, admitted}},
		{name: "marker wins over every limit", domain: "api", desc: marked(1, 1, "both=u"), want: []algorithm.Charge{always, always}},
		{name: "domain defaults", domain: "defaults", desc: costly(1, "k=u"), want: []algorithm.Charge{always}},
		{name: "the limit's own over domain defaults", domain: "defaults", desc: costly(1, "own=u"), want: []algorithm.Charge{admitted}},
		{name: "tree default", treeDefault: always, domain: "api", desc: costly(1, "tokens=u"), want: []algorithm.Charge{always}},
		{name: "tree default under the limit's own", treeDefault: always, domain: "api", desc: costly(1, "both=u"), want: []algorithm.Charge{always, always}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree := loadTreeOpts(t, chargeYAML, descriptor.Options{DefaultCharge: tt.treeDefault})
			f := newFixture(t, chargeYAML, func(o *Options) { o.Tree = func() *descriptor.Tree { return tree } })
			f.check(t, &Request{Domain: tt.domain, Descriptors: []Descriptor{tt.desc}})
			var got []algorithm.Charge
			for _, h := range f.store.batches[0] {
				got = append(got, h.Limit.Charge)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("charges = %v, want %v", got, tt.want)
			}
		})
	}
}

// loadTreeOpts is loadTree with options.
func loadTreeOpts(t testing.TB, yaml string, opts descriptor.Options) *descriptor.Tree {
	t.Helper()
	fsys := fstest.MapFS{}
	for i, doc := range strings.Split(yaml, "\n---\n") {
		fsys[fmt.Sprintf("config%d.yaml", i)] = &fstest.MapFile{Data: []byte(doc)}
	}
	tree, err := descriptor.LoadFS(fsys, opts)
	if err != nil {
		t.Fatalf("loading config: %v", err)
	}
	return tree
}

// TestCheckOverrideCharge checks the charge of an Envoy limit override:
// the rule's first limit's, else Options.DefaultCharge, and always for a
// marked descriptor.
func TestCheckOverrideCharge(t *testing.T) {
	o := &Override{RequestsPerUnit: 100, Unit: descriptor.Minute}
	tests := []struct {
		name       string
		defCharge  algorithm.Charge
		desc       Descriptor
		wantCharge algorithm.Charge
	}{
		{name: "no rule, default admitted", desc: Descriptor{Entries: entries("none=v")}, wantCharge: algorithm.ChargeAdmitted},
		{name: "no rule, default always", defCharge: algorithm.ChargeAlways, desc: Descriptor{Entries: entries("none=v")}, wantCharge: algorithm.ChargeAlways},
		{name: "rule admitted over default always", defCharge: algorithm.ChargeAlways, desc: Descriptor{Entries: entries("tokens=v")}, wantCharge: algorithm.ChargeAdmitted},
		{name: "rule always", desc: Descriptor{Entries: entries("reported=v")}, wantCharge: algorithm.ChargeAlways},
		{name: "first limit's charge", desc: Descriptor{Entries: entries("both=v")}, wantCharge: algorithm.ChargeAlways},
		{name: "marked", desc: marked(0, 1, "none=v"), wantCharge: algorithm.ChargeAlways},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, chargeYAML, func(opts *Options) { opts.DefaultCharge = tt.defCharge })
			dd := tt.desc
			dd.Override = o
			resp := f.check(t, &Request{Domain: "api", Descriptors: []Descriptor{dd}})
			hits := f.store.batches[0]
			if len(hits) != 1 || hits[0].Limit.Charge != tt.wantCharge || hits[0].Limit.Requests != 100 {
				t.Fatalf("hits = %+v, want one of 100 per minute charged %v", hits, tt.wantCharge)
			}
			if got := resp.Statuses[0].Limit.Charge; got != tt.wantCharge {
				t.Errorf("Status.Limit.Charge = %v, want %v", got, tt.wantCharge)
			}
		})
	}
}

func TestNewRejectsUnknownCharge(t *testing.T) {
	_, err := New(Options{Store: storetest.Failing{}, Tree: func() *descriptor.Tree { return nil }, DefaultCharge: 9})
	if want := "limiter: unknown charge 9"; err == nil || err.Error() != want {
		t.Errorf("New = %v, want %q", err, want)
	}
}

// TestCheckChargeKeepsCost checks that nothing the engine does to the hits
// of a rejected request takes an always-charged hit's cost away: a deny
// list turns the other hits into checks, and the quota-mode refund gives
// back only admitted hits.
func TestCheckChargeKeepsCost(t *testing.T) {
	t.Run("deny list", func(t *testing.T) {
		f := newFixture(t, chargeYAML, nil)
		f.check(t, &Request{Domain: "api", Descriptors: []Descriptor{
			costly(4, "tokens=u"), marked(0, 4, "tokens=v"), costly(4, "both=u"), {Entries: entries("bad=x")},
		}})
		var got []int64
		for _, h := range f.store.batches[0] {
			got = append(got, h.Cost)
		}
		if want := []int64{0, 4, 4, 0}; !reflect.DeepEqual(got, want) {
			t.Errorf("costs = %v, want %v (tokens=u, tokens=v marked, both's always and admitted limits)", got, want)
		}
	})
	t.Run("quota refund", func(t *testing.T) {
		f := newFixture(t, chargeYAML, nil)
		f.check(t, req("api", d("plan=p")))
		resp := f.check(t, &Request{Domain: "api", Descriptors: []Descriptor{
			{Entries: entries("plan=p")}, costly(2, "tokens=u"), marked(1, 3, "tokens=v"), costly(4, "reported=u"),
		}})
		if resp.Code != OverLimit {
			t.Fatalf("code = %v, want OVER_LIMIT (every quota descriptor is over)", resp.Code)
		}
		if n := len(f.store.batches); n != 3 {
			t.Fatalf("store saw %d batches, want 3 (exhaust, request, refund)", n)
		}
		refund := f.store.batches[2]
		want := []store.Hit{{Domain: "api", Entries: storeEntries("tokens=u"), Shard: "u",
			Limit: algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 10, Period: 60e6}, Cost: -2, Soft: true}}
		if !reflect.DeepEqual(refund, want) {
			t.Errorf("refund:\n got %+v\nwant %+v", refund, want)
		}
		for _, c := range []struct {
			kv   string
			want uint32
		}{{"tokens=u", 10}, {"tokens=v", 7}, {"reported=u", 6}} {
			if _, rem := f.probe(t, c.kv); rem != c.want {
				t.Errorf("%s: %d left, want %d", c.kv, rem, c.want)
			}
		}
	})
}

// TestCheckChargeAlwaysPastLimit checks what always-charged hits do to
// their counters: a report larger than what remains is charged and
// answered OVER_LIMIT, and the counter past its limit rejects what
// follows, a cost-0 check included. It needs a store that honours
// algorithm.Limit.Charge.
func TestCheckChargeAlwaysPastLimit(t *testing.T) {
	tests := []struct {
		name string
		desc Descriptor // a report of 15 tokens, against a limit of 10
	}{
		{"marker", marked(0, 15, "tokens=u")},
		{"rule", costly(15, "reported=u")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, chargeYAML, func(o *Options) { o.HeaderStyle = HeadersNone })
			key := tt.desc.Entries[len(tt.desc.Entries)-1].Key + "=u"
			if code, _ := f.probe(t, key); code != OK {
				t.Fatalf("check before the report = %v, want OK", code)
			}
			resp := f.check(t, &Request{Domain: "api", Descriptors: []Descriptor{tt.desc}})
			if resp.Code != OverLimit || resp.Statuses[0].Remaining != 0 {
				t.Errorf("report = %v, %d left; want OVER_LIMIT, 0 left", resp.Code, resp.Statuses[0].Remaining)
			}
			if code, rem := f.probe(t, key); code != OverLimit || rem != 0 {
				t.Errorf("check after the report = %v, %d left; want OVER_LIMIT, 0 left (15 of 10 charged)", code, rem)
			}
		})
	}
}

// TestCheckChargeMixed checks requests with admitted and always-charged
// descriptors: the always-charged ones are charged whatever the others'
// answers, the admitted ones stay all or nothing among themselves, and the
// overall code is OVER_LIMIT if any status is. It needs a store that
// honours algorithm.Limit.Charge.
func TestCheckChargeMixed(t *testing.T) {
	tests := []struct {
		name      string
		first     *Request // sent before req, if not nil
		req       *Request
		wantCodes []Code
		wantLeft  map[string]uint32 // remaining of each counter afterwards
	}{
		{
			name:      "admitted over, always within",
			first:     req("api", d("small=s")),
			req:       &Request{Domain: "api", Descriptors: []Descriptor{costly(1, "big=b"), costly(1, "small=s"), marked(1, 4, "tokens=u")}},
			wantCodes: []Code{OK, OverLimit, OK},
			wantLeft:  map[string]uint32{"big=b": 5, "tokens=u": 6},
		},
		{
			name:      "always over, admitted within",
			req:       &Request{Domain: "api", Descriptors: []Descriptor{costly(2, "big=b"), marked(0, 12, "tokens=u")}},
			wantCodes: []Code{OK, OverLimit},
			wantLeft:  map[string]uint32{"big=b": 5, "tokens=u": 0},
		},
		{
			name:      "all within",
			req:       &Request{Domain: "api", Descriptors: []Descriptor{costly(2, "big=b"), marked(0, 3, "tokens=u"), costly(3, "reported=r")}},
			wantCodes: []Code{OK, OK, OK},
			wantLeft:  map[string]uint32{"big=b": 3, "tokens=u": 7, "reported=r": 7},
		},
		{
			name:      "two always-charged reports, one over",
			req:       &Request{Domain: "api", Descriptors: []Descriptor{marked(1, 11, "tokens=in"), marked(1, 4, "tokens=out"), costly(15, "reported=total")}},
			wantCodes: []Code{OverLimit, OK, OverLimit},
			wantLeft:  map[string]uint32{"tokens=in": 0, "tokens=out": 6, "reported=total": 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, chargeYAML, func(o *Options) { o.HeaderStyle = HeadersNone })
			if tt.first != nil {
				f.check(t, tt.first)
			}
			resp := f.check(t, tt.req)
			wantCode := OK
			var got []Code
			for i, st := range resp.Statuses {
				got = append(got, st.Code)
				if tt.wantCodes[i] == OverLimit {
					wantCode = OverLimit
				}
			}
			if resp.Code != wantCode || !reflect.DeepEqual(got, tt.wantCodes) {
				t.Errorf("codes = %v %v, want %v %v", resp.Code, got, wantCode, tt.wantCodes)
			}
			for kv, want := range tt.wantLeft {
				if _, rem := f.probe(t, kv); rem != want {
					t.Errorf("%s: %d left, want %d", kv, rem, want)
				}
			}
		})
	}
}

// TestMetricsChargedPastLimit checks tollgate_charged_past_limit_hits: the
// cost of always-charged hits rejected by the store, by domain, rule and
// limit name, and nothing for admitted hits, however rejected.
func TestMetricsChargedPastLimit(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	f := newFixture(t, chargeYAML, func(o *Options) {
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	f.check(t, &Request{Domain: "api", Descriptors: []Descriptor{marked(0, 15, "tokens=u")}})
	f.check(t, &Request{Domain: "api", Descriptors: []Descriptor{costly(12, "reported=u")}})
	f.check(t, &Request{Domain: "api", Descriptors: []Descriptor{costly(11, "tokens=v")}})   // admitted: rejected, not charged
	f.check(t, &Request{Domain: "api", Descriptors: []Descriptor{marked(0, 0, "tokens=w")}}) // a check charges nothing
	f.check(t, &Request{Domain: "api", Descriptors: []Descriptor{marked(1, 11, "none=x"), costly(1, "tokens=x")}})
	got, _ := collect(t, reader, "tollgate_charged_past_limit_hits")
	want := map[string]int64{
		"domain=api,limit=tokens,rule=tokens":     15,
		"domain=api,limit=reported,rule=reported": 12,
	}
	if !maps.Equal(got, want) {
		t.Errorf("tollgate_charged_past_limit_hits:\n got %v\nwant %v", sorted(got), sorted(want))
	}
}

// BenchmarkCheckMarked is BenchmarkCheck's cases with every descriptor
// marked tollgate.charge=always.
func BenchmarkCheckMarked(b *testing.B) {
	cases := []struct {
		name string
		req  *Request
	}{
		{"one descriptor", &Request{Domain: "api", Descriptors: []Descriptor{marked(1, 1, "client=c1")}}},
		{"three descriptors", &Request{Domain: "api", Descriptors: []Descriptor{
			marked(1, 1, "client=c1"), marked(1, 1, "tenant=t1", "path=/x"), marked(0, 1, "other=o"),
		}}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			f := newFixture(b, benchYAML, nil)
			f.store.inner, f.lim.store = nil, f.store.inner
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := f.lim.Check(ctx, bc.req)
				if err != nil || resp.Code != OK {
					b.Fatalf("Check = %+v, %v", resp, err)
				}
			}
		})
	}
}
