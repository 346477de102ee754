package limiter

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// observerYAML adds a shadowed rule and a failure mode closed to
// policyYAML.
const observerYAML = policyYAML + `  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window, name: shadowed}
  - key: closed
    failure_mode: closed
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window, name: strict}
`

// observed is an Observer that writes down what it hears.
type observed struct {
	mu    sync.Mutex
	rules []string // "domain rule limit (requests per unit)", as asked
	calls []string // "domain rule limit: entries hits rejected"
}

func (o *observed) Rule(domain, rule, limit string, lim *descriptor.Limit) RuleObserver {
	o.mu.Lock()
	defer o.mu.Unlock()
	rpu := "nil"
	if lim != nil {
		rpu = fmt.Sprint(lim.RequestsPerUnit)
	}
	o.rules = append(o.rules, fmt.Sprintf("%s %s %s (%s)", domain, rule, limit, rpu))
	return &observedRule{o: o, id: domain + " " + rule + " " + limit}
}

type observedRule struct {
	o  *observed
	id string
}

func (r *observedRule) Observe(now time.Time, entries []descriptor.Entry, hits uint64, rejected bool) {
	r.o.mu.Lock()
	defer r.o.mu.Unlock()
	if !now.Equal(t0) {
		r.o.calls = append(r.o.calls, "at "+now.String())
	}
	var kv []string
	for _, e := range entries {
		kv = append(kv, e.Key+"="+e.Value)
	}
	r.o.calls = append(r.o.calls, fmt.Sprintf("%s: %s %d %v", r.id, strings.Join(kv, ","), hits, rejected))
}

func (o *observed) take() (rules, calls []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	rules, calls = o.rules, o.calls
	o.rules, o.calls = nil, nil
	return rules, calls
}

// TestObserver checks what the engine tells its Observer: every
// descriptor decided by a limit or an override, under the identity the
// metrics use, with its hits and whether it was over; nothing of the
// others; and each identity asked for once per rule set.
func TestObserver(t *testing.T) {
	obs := &observed{}
	ovs := &overrides{}
	f := newFixture(t, observerYAML, func(o *Options) {
		o.Observer = obs
		o.Overrides = ovs.current
	})
	withHits := func(r *Request, hits uint64) *Request {
		r.Descriptors[0].Hits, r.Descriptors[0].HasHits = hits, true
		return r
	}
	refund := req("api", d("api_key=b"))
	refund.Descriptors[0].Refund = true
	envoy := req("api", d("api_key=c"))
	envoy.Descriptors[0].Override = &Override{RequestsPerUnit: 5, Unit: descriptor.Minute}
	tests := []struct {
		name  string
		reqs  []*Request
		rules []string
		calls []string
	}{
		{
			name:  "counted, then over",
			reqs:  []*Request{req("api", d("api_key=a")), req("api", d("api_key=a")), req("api", d("api_key=a"))},
			rules: []string{"api api_key per_key (2)"},
			calls: []string{"api api_key per_key: api_key=a 1 false", "api api_key per_key: api_key=a 1 false", "api api_key per_key: api_key=a 1 true"},
		},
		{
			name:  "request hits, then descriptor hits, a check and a refund",
			reqs:  []*Request{{Domain: "api", Hits: 2, Descriptors: []Descriptor{{Entries: entries("api_key=b")}}}, withHits(req("api", d("api_key=x")), 0), refund},
			calls: []string{"api api_key per_key: api_key=b 2 false", "api api_key per_key: api_key=x 0 false"},
		},
		{
			name: "not by a limit: unknown domain, unmatched, unlimited, allow and deny lists",
			reqs: []*Request{req("nope", d("api_key=a")), req("api", d("other=a")), req("api", d("free=x")),
				req("api", d("api_key=internal_1")), req("api", d("api_key=revoked_1"))},
		},
		{
			name:  "shadow mode: OK but over",
			reqs:  []*Request{req("api", d("shadow=s")), req("api", d("shadow=s"))},
			rules: []string{"api shadow shadowed (1)"},
			calls: []string{"api shadow shadowed: shadow=s 1 false", "api shadow shadowed: shadow=s 1 true"},
		},
		{
			name:  "a charge marker is not a value",
			reqs:  []*Request{req("api", d("tenant=t", "tollgate.charge=always", "path=/p"))},
			rules: []string{"api tenant/path  (10)"},
			calls: []string{"api tenant/path : tenant=t,path=/p 1 false"},
		},
		{
			name:  "Envoy's override",
			reqs:  []*Request{envoy},
			rules: []string{"api api_key (override) (nil)"},
			calls: []string{"api api_key (override): api_key=c 1 false"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range tt.reqs {
				f.check(t, r)
			}
			rules, calls := obs.take()
			if !slices.Equal(rules, tt.rules) || !slices.Equal(calls, tt.calls) {
				t.Errorf("asked for\n  %q\nwant\n  %q\nheard\n  %q\nwant\n  %q", rules, tt.rules, calls, tt.calls)
			}
		})
	}

	t.Run("an operator's override", func(t *testing.T) {
		ovs.use(ov("o", d("api_key=d"), nil, 2))
		f.check(t, req("api", d("api_key=d")))
		rules, calls := obs.take()
		// The identity of Envoy's override on the same rule, known.
		if len(rules) != 0 {
			t.Errorf("asked for %q again", rules)
		}
		if want := []string{"api api_key (override): api_key=d 1 false"}; !slices.Equal(calls, want) {
			t.Errorf("heard %q, want %q", calls, want)
		}
		ovs.use()
	})
}

// TestObserverStoreFailure checks that decisions answered by a failure
// mode are heard under the identity of the rule's first limit: rejected
// by the failure mode closed, not by the failure mode open.
func TestObserverStoreFailure(t *testing.T) {
	obs := &observed{}
	f := newFixture(t, observerYAML, func(o *Options) {
		o.Observer = obs
		o.Store = storetest.Failing{Err: fmt.Errorf("redis: %w", store.ErrUnavailable)}
	})
	f.check(t, req("api", d("api_key=a"), d("closed=c")))
	_, calls := obs.take()
	want := []string{"api api_key per_key: api_key=a 1 false", "api closed strict: closed=c 1 true"}
	if !slices.Equal(calls, want) {
		t.Errorf("heard %q, want %q", calls, want)
	}
}

// TestObserverNoAllocation checks that observing costs the engine no
// allocation: the identity is resolved with the metrics' labels.
func TestObserverNoAllocation(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool allocates at random")
	}
	check := func(obs Observer) float64 {
		f := newFixture(t, benchYAML, func(o *Options) {
			if obs != nil {
				o.Observer = obs
			}
			o.Overrides = (&overrides{}).current
		})
		f.store.inner, f.lim.store = nil, f.store.inner
		r := req("api", d("client=c1"), d("tenant=t1", "path=/x"))
		return testing.AllocsPerRun(100, func() { f.check(t, r) })
	}
	off, on := check(nil), check(discard{})
	if on != off {
		t.Errorf("%v allocations a check with an observer, %v without", on, off)
	}
}

// discard is an Observer that keeps nothing.
type discard struct{}

func (discard) Rule(string, string, string, *descriptor.Limit) RuleObserver { return discard{} }
func (discard) Observe(time.Time, []descriptor.Entry, uint64, bool)         {}
