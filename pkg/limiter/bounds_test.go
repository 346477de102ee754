package limiter

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

func TestCheckRejectsInvalidRequests(t *testing.T) {
	small := func(o *Options) {
		o.MaxDescriptors, o.MaxEntries, o.MaxKeyLen, o.MaxValueLen, o.MaxHits = 2, 2, 8, 8, 100
	}
	limiters := map[string]*Limiter{
		"small":    newFixture(t, policyYAML, small).lim,
		"defaults": newFixture(t, policyYAML, nil).lim,
	}
	ok := Descriptor{Entries: entries("k=v")}
	many := func(n int) []Descriptor {
		out := make([]Descriptor, n)
		for i := range out {
			out[i] = ok
		}
		return out
	}
	withHits := func(n uint64) Descriptor { return Descriptor{Entries: entries("k=v"), Hits: n, HasHits: true} }
	tests := []struct {
		name    string
		limiter string
		req     *Request
		want    string // error text after the ErrInvalidRequest prefix; "" for valid
	}{
		{name: "valid", limiter: "small", req: &Request{Domain: "d", Descriptors: []Descriptor{ok}}},
		{name: "empty value is fine", limiter: "small", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("k=")}}}},
		{name: "nil", limiter: "small", want: "no request"},
		{name: "no domain", limiter: "small", req: &Request{Descriptors: []Descriptor{ok}}, want: "empty domain"},
		{name: "no descriptors", limiter: "small", req: &Request{Domain: "d"}, want: "no descriptors"},
		{name: "no entries", limiter: "small", req: &Request{Domain: "d", Descriptors: []Descriptor{ok, {}}}, want: "descriptors[1]: no entries"},
		{name: "empty key", limiter: "small", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("k=v", "=v")}}}, want: "descriptors[0].entries[1]: empty key"},
		{name: "override unit", limiter: "small", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("k=v"), Override: &Override{RequestsPerUnit: 1}}}}, want: "descriptors[0].limit: invalid unit 0"},

		// An untrusted source may neither charge always nor refund.
		{name: "untrusted plain", limiter: "defaults", req: &Request{Domain: "d", Untrusted: true, Descriptors: []Descriptor{ok}}},
		{name: "untrusted charge marker", limiter: "defaults", req: &Request{Domain: "d", Untrusted: true, Descriptors: []Descriptor{ok, {Entries: entries("k=v", ChargeKey+"=always")}}},
			want: "descriptors[1]: " + ErrUntrusted.Error()},
		{name: "untrusted refund", limiter: "defaults", req: &Request{Domain: "d", Untrusted: true, Descriptors: []Descriptor{{Entries: entries("k=v"), Refund: true}}},
			want: "descriptors[0]: " + ErrUntrusted.Error()},
		{name: "trusted charge marker and refund", limiter: "defaults", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("k=v", ChargeKey+"=always")}, {Entries: entries("k=v"), Refund: true}}}},

		// The bounds of Options, at and one past each.
		{name: "at every bound", limiter: "small", req: &Request{Domain: "12345678", Hits: 100, Descriptors: []Descriptor{
			{Entries: entries("12345678=12345678", "k=v"), Hits: 100, HasHits: true}, ok,
		}}},
		{name: "long domain", limiter: "small", req: &Request{Domain: "123456789", Descriptors: []Descriptor{ok}}, want: "domain longer than 8 bytes"},
		{name: "too many descriptors", limiter: "small", req: &Request{Domain: "d", Descriptors: many(3)}, want: "3 descriptors exceed the limit of 2"},
		{name: "request hits", limiter: "small", req: &Request{Domain: "d", Hits: 101, Descriptors: []Descriptor{ok}}, want: "hits_addend 101 exceeds the limit of 100"},
		{name: "too many entries", limiter: "small", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("a=1", "b=2", "c=3")}}}, want: "descriptors[0]: 3 entries exceed the limit of 2"},
		{name: "descriptor hits", limiter: "small", req: &Request{Domain: "d", Descriptors: []Descriptor{ok, withHits(1 << 40)}}, want: "descriptors[1].hits_addend: 1099511627776 exceeds the limit of 100"},
		{name: "descriptor hits without HasHits", limiter: "small", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("k=v"), Hits: 1 << 40}}}},
		{name: "long key", limiter: "small", req: &Request{Domain: "d", Descriptors: []Descriptor{ok, {Entries: entries("123456789=v")}}}, want: "descriptors[1].entries[0]: key longer than 8 bytes"},
		{name: "long value", limiter: "small", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("k=v", "k=123456789")}}}, want: "descriptors[0].entries[1]: value longer than 8 bytes"},

		// Zero bounds in Options are the defaults.
		{name: "default descriptors", limiter: "defaults", req: &Request{Domain: "d", Descriptors: many(DefaultMaxDescriptors)}},
		{name: "past default descriptors", limiter: "defaults", req: &Request{Domain: "d", Descriptors: many(DefaultMaxDescriptors + 1)}, want: "65 descriptors exceed the limit of 64"},
		{name: "past default entries", limiter: "defaults", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: make([]descriptor.Entry, DefaultMaxEntries+1)}}}, want: "descriptors[0]: 33 entries exceed the limit of 32"},
		{name: "past default domain", limiter: "defaults", req: &Request{Domain: strings.Repeat("d", DefaultMaxKeyLen+1), Descriptors: []Descriptor{ok}}, want: "domain longer than 256 bytes"},
		{name: "past default key", limiter: "defaults", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries(strings.Repeat("k", DefaultMaxKeyLen+1) + "=v")}}}, want: "descriptors[0].entries[0]: key longer than 256 bytes"},
		{name: "past default value", limiter: "defaults", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("k=" + strings.Repeat("v", DefaultMaxValueLen+1))}}}, want: "descriptors[0].entries[0]: value longer than 4096 bytes"},
		{name: "default hits", limiter: "defaults", req: &Request{Domain: "d", Hits: DefaultMaxHits, Descriptors: []Descriptor{withHits(DefaultMaxHits)}}},
		{name: "past default request hits", limiter: "defaults", req: &Request{Domain: "d", Hits: DefaultMaxHits + 1, Descriptors: []Descriptor{ok}}, want: "hits_addend 1000000001 exceeds the limit of 1000000000"},
		{name: "past default descriptor hits", limiter: "defaults", req: &Request{Domain: "d", Descriptors: []Descriptor{withHits(DefaultMaxHits + 1)}}, want: "descriptors[0].hits_addend: 1000000001 exceeds the limit of 1000000000"},
		{name: "a 2000000-token report", limiter: "defaults", req: &Request{Domain: "d", Descriptors: []Descriptor{withHits(2_000_000)}}},

		// The ChargeKey marker.
		{name: "marker first", limiter: "defaults", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("tollgate.charge=always", "k=v")}}}},
		{name: "marker last", limiter: "defaults", req: &Request{Domain: "d", Descriptors: []Descriptor{ok, {Entries: entries("k=v", "tollgate.charge=always")}}}},
		{name: "marker value", limiter: "defaults", req: &Request{Domain: "d", Descriptors: []Descriptor{ok, {Entries: entries("k=v", "tollgate.charge=x")}}}, want: `descriptors[1]: tollgate.charge must be "always", got "x"`},
		{name: "marker value admitted", limiter: "defaults", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("tollgate.charge=admitted", "k=v")}}}, want: `descriptors[0]: tollgate.charge must be "always", got "admitted"`},
		{name: "marker value case", limiter: "defaults", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("a=1", "tollgate.charge=Always", "k=v")}}}, want: `descriptors[0]: tollgate.charge must be "always", got "Always"`},
		{name: "marker value empty", limiter: "defaults", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("k=v", "tollgate.charge=")}}}, want: `descriptors[0]: tollgate.charge must be "always", got ""`},
		{name: "marker alone", limiter: "defaults", req: &Request{Domain: "d", Descriptors: []Descriptor{ok, ok, {Entries: entries("tollgate.charge=always")}}}, want: "descriptors[2]: no entries but tollgate.charge"},
		{name: "markers alone", limiter: "defaults", req: &Request{Domain: "d", Descriptors: []Descriptor{{Entries: entries("tollgate.charge=always", "tollgate.charge=always")}}}, want: "descriptors[0]: no entries but tollgate.charge"},
		{name: "marker in an unknown domain", limiter: "defaults", req: &Request{Domain: "nope", Descriptors: []Descriptor{{Entries: entries("tollgate.charge=sometimes", "k=v")}}}, want: `descriptors[0]: tollgate.charge must be "always", got "sometimes"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := limiters[tt.limiter].Check(context.Background(), tt.req)
			if tt.want == "" {
				if err != nil || resp.Code != OK {
					t.Fatalf("Check = %+v, %v; want OK", resp, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidRequest) || err.Error() != ErrInvalidRequest.Error()+": "+tt.want {
				t.Errorf("Check error = %v, want %q wrapping ErrInvalidRequest", err, tt.want)
			}
		})
	}
}

func TestNewRejectsNegativeBounds(t *testing.T) {
	tree := func() *descriptor.Tree { return nil }
	for _, tt := range []struct {
		opts Options
		want string
	}{
		{Options{MaxDescriptors: -1}, "limiter: negative maximum descriptors -1"},
		{Options{MaxEntries: -2}, "limiter: negative maximum entries -2"},
		{Options{MaxKeyLen: -3}, "limiter: negative maximum key length -3"},
		{Options{MaxValueLen: -4}, "limiter: negative maximum value length -4"},
	} {
		tt.opts.Store, tt.opts.Tree = storetest.Failing{}, tree
		if _, err := New(tt.opts); err == nil || err.Error() != tt.want {
			t.Errorf("New(%+v) = %v, want %q", tt.opts, err, tt.want)
		}
	}
}
