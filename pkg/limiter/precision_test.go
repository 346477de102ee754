package limiter

import (
	"reflect"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// precisionYAML has strict and cached limits, in one rule and in domain
// defaults, and a sliding_window_log limit under a cached default.
const precisionYAML = `
domain: api
descriptors:
  - key: strict
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: cached
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window, precision: cached}
  - key: both
    rate_limits:
      - {unit: second, requests_per_unit: 10, precision: cached}
      - {unit: hour, requests_per_unit: 100, algorithm: sliding_window_counter}
      - {unit: day, requests_per_unit: 1000, algorithm: sliding_window_counter, precision: cached}
---
domain: defaults
defaults:
  precision: cached
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: own
    rate_limit: {unit: minute, requests_per_unit: 10, precision: strict}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_window_log}
`

// TestCheckCachedOfHits checks that every hit carries its limit's
// precision as store.Hit.Cached: the limit's own, else its domain's
// defaults, else the tree's default, never on a sliding_window_log limit,
// and the rule's first limit's for an override.
func TestCheckCachedOfHits(t *testing.T) {
	override := &Override{RequestsPerUnit: 100, Unit: descriptor.Minute}
	tests := []struct {
		name        string
		treeDefault descriptor.Precision
		domain      string
		desc        Descriptor
		want        []bool
	}{
		{name: "strict by default", domain: "api", desc: costly(1, "strict=u"), want: []bool{false}},
		{name: "the limit's precision", domain: "api", desc: costly(1, "cached=u"), want: []bool{true}},
		{name: "each limit its own", domain: "api", desc: costly(1, "both=u"), want: []bool{true, false, true}},
		{name: "domain defaults", domain: "defaults", desc: costly(1, "k=u"), want: []bool{true}},
		{name: "the limit's own over domain defaults", domain: "defaults", desc: costly(1, "own=u"), want: []bool{false}},
		{name: "a log is never cached", domain: "defaults", desc: costly(1, "log=u"), want: []bool{false}},
		{name: "tree default", treeDefault: descriptor.PrecisionCached, domain: "api", desc: costly(1, "strict=u"), want: []bool{true}},
		{name: "override of a cached rule", domain: "api", desc: Descriptor{Entries: entries("cached=u"), Override: override}, want: []bool{true}},
		{name: "override of a strict rule", domain: "api", desc: Descriptor{Entries: entries("strict=u"), Override: override}, want: []bool{false}},
		{name: "override without a rule", domain: "api", desc: Descriptor{Entries: entries("none=u"), Override: override}, want: []bool{false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree := loadTreeOpts(t, precisionYAML, descriptor.Options{DefaultPrecision: tt.treeDefault})
			f := newFixture(t, precisionYAML, func(o *Options) { o.Tree = func() *descriptor.Tree { return tree } })
			f.check(t, &Request{Domain: tt.domain, Descriptors: []Descriptor{tt.desc}})
			var got []bool
			for _, h := range f.store.batches[0] {
				got = append(got, h.Cached)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Cached = %v, want %v", got, tt.want)
			}
		})
	}
}
