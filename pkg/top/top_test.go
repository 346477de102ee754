package top

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// t0 is the start of a slot, a minute and a five-minute block.
var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func newRecorder(t testing.TB, k int, c *clock, peers Peers) *Recorder {
	t.Helper()
	r, err := New(Options{Capacity: k, Now: c.Now, Peers: peers})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// client returns the descriptor of one client.
func client(name string) []descriptor.Entry {
	return []descriptor.Entry{{Key: "api_key", Value: name}}
}

func name(e Entry) string {
	var parts []string
	for _, d := range e.Descriptor {
		parts = append(parts, d.Key+"="+d.Value)
	}
	return strings.Join(parts, ",")
}

var perMinute = &descriptor.Limit{Name: "per_key", Unit: descriptor.Minute, UnitMultiplier: 1, RequestsPerUnit: 100}

// exact counts a stream exactly, per value.
type exact struct {
	req, rej map[string]uint64
	n, nRej  uint64
	// unique, if not empty, prefixes values seen once each and never
	// rejected, which are counted in n alone.
	unique string
}

// requests returns the true requests of v.
func (x *exact) requests(v string) uint64 {
	if x.unique != "" && strings.HasPrefix(v, x.unique) {
		return 1
	}
	return x.req[v]
}

func newExact() *exact { return &exact{req: map[string]uint64{}, rej: map[string]uint64{}} }

func (x *exact) add(v string, hits uint64, rejected bool) {
	x.n += hits
	if x.unique != "" && strings.HasPrefix(v, x.unique) {
		return
	}
	x.req[v] += hits
	if rejected {
		x.rej[v] += hits
		x.nRej += hits
	}
}

// checkBounds checks an answer against the exact counts: every count an
// upper bound overstating by at most its error, every error at most
// N/K, and, if the answer is complete (its limit is at least K), every
// value whose true count is over N/K in it.
func checkBounds(t *testing.T, ans *Answer, x *exact, k int, complete bool) {
	t.Helper()
	counts, n := x.req, x.n
	if ans.By == ByRejected {
		counts, n = x.rej, x.nRej
	}
	bound := n / uint64(k)
	seen := map[string]bool{}
	for _, e := range ans.Entries {
		v := name(e)
		seen[v] = true
		for _, c := range []struct {
			what       string
			got, err   uint64
			truth, tot uint64
		}{
			{"requests", e.Requests, e.RequestsError, x.requests(v), x.n},
			{"rejected", e.Rejected, e.RejectedError, x.rej[v], x.nRej},
		} {
			if c.got < c.truth || c.got-c.err > c.truth {
				t.Errorf("%s: %s %d ± %d, but the true count is %d", v, c.what, c.got, c.err, c.truth)
			}
			if c.err > c.tot/uint64(k) {
				t.Errorf("%s: %s error %d is over N/K = %d/%d", v, c.what, c.err, c.tot, k)
			}
		}
	}
	if complete {
		for v, c := range counts {
			if c > bound && !seen[v] {
				t.Errorf("%s: true count %d is over N/K = %d but it is not in the answer", v, c, bound)
			}
		}
	}
}

func top(t *testing.T, r *Recorder, q Query) *Answer {
	t.Helper()
	ans, err := r.Top(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return ans
}

// TestFlood floods one rule with a million distinct values, among them
// five heavy hitters, over three intervals: each interval keeps K
// values, and the five come out on top in order, within the bound.
func TestFlood(t *testing.T) {
	const k = 64
	c := &clock{t: t0}
	r := newRecorder(t, k, c, nil)
	h := r.Rule("api", "api_key", "per_key", perMinute)
	heavy := []uint64{100_000, 90_000, 80_000, 70_000, 60_000} // per million decisions
	now := t0
	x := newExact()
	x.unique = "api_key=light-"
	rng := rand.New(rand.NewPCG(1, 2))
	const total = 1_000_000
	e := make([]descriptor.Entry, 1)
	heavyNames := []string{"heavy-0", "heavy-1", "heavy-2", "heavy-3", "heavy-4"}
	for i := range total {
		if i%(total/3) == 0 {
			// Three slots: the flood spans their merge.
			c.Set(t0.Add(time.Duration(i/(total/3)) * slotLen))
			now = c.Now()
		}
		v, isHeavy := "", false
		p := rng.Uint64N(total)
		for j, w := range heavy {
			if p < w {
				v, isHeavy = heavyNames[j], true
				break
			}
			p -= w
		}
		rejected := isHeavy && rng.IntN(2) == 0
		if isHeavy {
			x.add("api_key="+v, 1, rejected)
		} else {
			v = "light-" + strconv.Itoa(i)
			x.n++
		}
		e[0] = descriptor.Entry{Key: "api_key", Value: v}
		h.Observe(now, e, 1, rejected)
		if i%100_000 == 0 {
			h.mu.Lock()
			if n := len(h.ring.live.req.slots); n > k {
				t.Fatalf("the live summary holds %d values, over K = %d", n, k)
			}
			h.mu.Unlock()
		}
	}
	h.mu.Lock()
	for _, f := range h.ring.slots {
		if len(f.req.entries) > k || len(f.rej.entries) > k {
			t.Errorf("slot %d keeps %d and %d values, over K = %d", f.id, len(f.req.entries), len(f.rej.entries), k)
		}
	}
	h.mu.Unlock()
	for _, by := range []By{ByRequests, ByRejected} {
		ans := top(t, r, Query{By: by, Window: Minute, Limit: 5})
		var got []string
		for _, e := range ans.Entries {
			got = append(got, name(e))
		}
		want := []string{"api_key=heavy-0", "api_key=heavy-1", "api_key=heavy-2", "api_key=heavy-3", "api_key=heavy-4"}
		if !slices.Equal(got, want) {
			t.Errorf("by %s: top five %v, want %v", by, got, want)
		}
		checkBounds(t, ans, x, k, false)
		checkBounds(t, top(t, r, Query{By: by, Window: Minute, Limit: 1000}), x, k, true)
	}
}

// TestErrorBound checks the bound on random skewed streams, for several
// capacities, each window and both orders, across interval boundaries.
func TestErrorBound(t *testing.T) {
	for _, k := range []int{1, 2, 8, 64} {
		for seed := range uint64(5) {
			t.Run(fmt.Sprintf("K=%d/seed=%d", k, seed), func(t *testing.T) {
				c := &clock{t: t0}
				r := newRecorder(t, k, c, nil)
				h := r.Rule("api", "api_key", "per_key", perMinute)
				rng := rand.New(rand.NewPCG(seed, uint64(k)))
				zipf := rand.NewZipf(rng, 1.2, 1, 2000)
				x := newExact()
				// 20 minutes of traffic, from 0 to 39 decisions a second.
				for s := range 20 * 60 {
					c.Set(t0.Add(time.Duration(s) * time.Second))
					for range rng.IntN(40) {
						v := fmt.Sprint(zipf.Uint64())
						hits := 1 + rng.Uint64N(3)
						rejected := rng.IntN(4) == 0
						h.Observe(c.Now(), client(v), hits, rejected)
						if s >= 20*60-300 { // the 5m window: the last 5 minutes to the second
							x.add("api_key="+v, hits, rejected)
						}
					}
				}
				// At the turn of the minute, 5m is exactly the last five
				// minutes.
				c.Set(t0.Add(20 * time.Minute))
				for _, by := range []By{ByRequests, ByRejected} {
					ans := top(t, r, Query{By: by, Window: FiveMinutes, Limit: 10 * k})
					checkBounds(t, ans, x, k, true)
				}
			})
		}
	}
}

// TestMerge checks that two instances' summaries, merged through Peers,
// keep the bound of the fleet's totals, and say they merged two.
func TestMerge(t *testing.T) {
	const k = 16
	c := &clock{t: t0}
	b := newRecorder(t, k, c, nil)
	peers := peersFunc(func(context.Context) ([]*Snapshot, error) {
		// Through the wire format, as with Redis.
		data, err := b.Snapshot().MarshalBinary()
		if err != nil {
			return nil, err
		}
		var s Snapshot
		return []*Snapshot{&s}, s.UnmarshalBinary(data)
	})
	a := newRecorder(t, k, c, peers)
	x := newExact()
	rng := rand.New(rand.NewPCG(7, 7))
	zipf := rand.NewZipf(rng, 1.1, 1, 5000)
	for s := range 50 {
		c.Set(t0.Add(time.Duration(s) * time.Second))
		for i := range 400 {
			v := fmt.Sprint(zipf.Uint64())
			rec := a
			if i%3 == 0 {
				rec = b
			}
			rejected := rng.IntN(3) == 0
			rec.Record(c.Now(), "api", "api_key", "per_key", perMinute, client(v), 1, rejected)
			x.add("api_key="+v, 1, rejected)
		}
	}
	for _, by := range []By{ByRequests, ByRejected} {
		ans := top(t, a, Query{By: by, Window: Minute, Limit: 1000})
		if ans.Instances != 2 || ans.Partial {
			t.Fatalf("merged %d instances (partial %v), want 2", ans.Instances, ans.Partial)
		}
		checkBounds(t, ans, x, k, true)
		if local := top(t, a, Query{By: by, Window: Minute, Local: true}); local.Instances != 1 {
			t.Errorf("a local answer merged %d instances", local.Instances)
		}
	}
	// The two instances' snapshots merged twice, or in another order,
	// answer the same.
	again := top(t, a, Query{By: ByRequests, Window: Minute, Limit: 1000})
	if first := top(t, a, Query{By: ByRequests, Window: Minute, Limit: 1000}); !equalAnswers(first, again) {
		t.Error("two merges of the same snapshots differ")
	}
}

func equalAnswers(a, b *Answer) bool {
	if len(a.Entries) != len(b.Entries) {
		return false
	}
	for i := range a.Entries {
		x, y := a.Entries[i], b.Entries[i]
		if name(x) != name(y) || x.Requests != y.Requests || x.Rejected != y.Rejected || x.Error != y.Error {
			return false
		}
	}
	return true
}

type peersFunc func(context.Context) ([]*Snapshot, error)

func (f peersFunc) Peers(ctx context.Context) ([]*Snapshot, error) { return f(ctx) }

// TestWindows checks what each window counts as time passes: the live
// slot, finished slots, minutes and blocks, and when each falls out.
func TestWindows(t *testing.T) {
	c := &clock{t: t0}
	r := newRecorder(t, 8, c, nil)
	h := r.Rule("api", "api_key", "per_key", perMinute)
	// One decision at each of these offsets, of a value naming it.
	at := []time.Duration{0, 15 * time.Second, 59 * time.Second, 2 * time.Minute, 4*time.Minute + 30*time.Second, 7 * time.Minute, 40 * time.Minute}
	for _, d := range at {
		h.Observe(t0.Add(d), client(d.String()), 1, false)
	}
	tests := []struct {
		now  time.Duration
		want map[Window][]string
	}{
		{now: 40*time.Minute + 5*time.Second, want: map[Window][]string{
			Minute:      {"40m0s"},
			FiveMinutes: {"40m0s"},
			Hour:        {"0s", "15s", "59s", "2m0s", "4m30s", "7m0s", "40m0s"},
		}},
		{now: 41*time.Minute + 5*time.Second, want: map[Window][]string{
			Minute:      {"40m0s"}, // the slot of 40:00 is 6 slots back
			FiveMinutes: {"40m0s"},
			Hour:        {"0s", "15s", "59s", "2m0s", "4m30s", "7m0s", "40m0s"},
		}},
		{now: 41*time.Minute + 15*time.Second, want: map[Window][]string{
			Minute:      nil,
			FiveMinutes: {"40m0s"},
			Hour:        {"0s", "15s", "59s", "2m0s", "4m30s", "7m0s", "40m0s"},
		}},
		{now: 62 * time.Minute, want: map[Window][]string{
			Minute:      nil,
			FiveMinutes: nil,
			Hour:        {"0s", "15s", "59s", "2m0s", "4m30s", "7m0s", "40m0s"}, // 12 blocks back: from 0s on
		}},
		{now: 66 * time.Minute, want: map[Window][]string{
			Minute:      nil,
			FiveMinutes: nil,
			Hour:        {"7m0s", "40m0s"}, // blocks from 5m on: 0s to 4m30s have fallen out
		}},
		{now: 100 * time.Minute, want: map[Window][]string{Hour: {"40m0s"}}},
		{now: 106 * time.Minute, want: map[Window][]string{}},
	}
	for _, tt := range tests {
		c.Set(t0.Add(tt.now))
		for w := range Window(numWindows) {
			var got []string
			for _, e := range top(t, r, Query{By: ByRequests, Window: w, Limit: 100}).Entries {
				got = append(got, e.Descriptor[0].Value)
			}
			slices.SortFunc(got, func(a, b string) int {
				da, _ := time.ParseDuration(a)
				db, _ := time.ParseDuration(b)
				return int(da - db)
			})
			if !slices.Equal(got, tt.want[w]) {
				t.Errorf("at %v, window %s: %v, want %v", tt.now, w, got, tt.want[w])
			}
		}
	}
	// Idle for over an hour: forgotten, and counted afresh after.
	r.mu.Lock()
	n := len(r.rules)
	r.mu.Unlock()
	if n != 0 {
		t.Errorf("%d identities kept after an idle hour", n)
	}
	h.Observe(c.Now(), client("back"), 3, true)
	ans := top(t, r, Query{Window: Minute})
	if len(ans.Entries) != 1 || ans.Entries[0].Requests != 3 || ans.Entries[0].Rejected != 3 {
		t.Errorf("after coming back: %+v", ans.Entries)
	}
	// A newer Rule of the same identity takes over from the forgotten
	// one, which forwards to it.
	c.Set(c.Now().Add(2 * time.Hour))
	r.Snapshot()
	h2 := r.Rule("api", "api_key", "per_key", perMinute)
	h.Observe(c.Now(), client("old"), 1, false)
	h2.Observe(c.Now(), client("new"), 1, false)
	if ans := top(t, r, Query{By: ByRequests, Window: Minute}); len(ans.Entries) != 2 {
		t.Errorf("a forgotten Rule and its successor: %+v", ans.Entries)
	}
}

// TestQuery checks filtering, ordering, the limit and the errors of
// Top.
func TestQuery(t *testing.T) {
	c := &clock{t: t0}
	r := newRecorder(t, 8, c, nil)
	search := &descriptor.Limit{Name: "search", Unit: descriptor.Second, UnitMultiplier: 1, RequestsPerUnit: 10}
	rec := func(domain, rule, limit string, lim *descriptor.Limit, v string, n int, rejected int) {
		for i := range n {
			r.Record(c.Now(), domain, rule, limit, lim, client(v), 1, i < rejected)
		}
	}
	rec("api", "api_key", "per_key", perMinute, "a", 10, 1)
	rec("api", "api_key", "per_key", perMinute, "b", 5, 5)
	rec("api", "api_key/endpoint=/search", "search", search, "c", 7, 3)
	rec("web", "api_key", "per_key", perMinute, "d", 20, 0)
	rec("api", "", OverrideLimit, nil, "e", 2, 2)
	tests := []struct {
		q    Query
		want string
	}{
		{Query{}, "api/api_key/per_key api_key=b 5 5, api/api_key/endpoint=/search/search api_key=c 7 3, api//(override) api_key=e 2 2, api/api_key/per_key api_key=a 10 1"},
		{Query{By: ByRequests, Limit: 2}, "web/api_key/per_key api_key=d 20 0, api/api_key/per_key api_key=a 10 1"},
		{Query{Domain: "api", By: ByRequests, Limit: 2}, "api/api_key/per_key api_key=a 10 1, api/api_key/endpoint=/search/search api_key=c 7 3"},
		{Query{Rule: "search"}, "api/api_key/endpoint=/search/search api_key=c 7 3"},
		{Query{Rule: "api_key/endpoint=/search"}, "api/api_key/endpoint=/search/search api_key=c 7 3"},
		{Query{Domain: "web", Rule: "api_key"}, ""},
		{Query{Domain: "nope"}, ""},
	}
	for _, tt := range tests {
		ans := top(t, r, tt.q)
		var got []string
		for _, e := range ans.Entries {
			got = append(got, fmt.Sprintf("%s/%s/%s %s %d %d", e.Domain, e.Rule, e.Limit, name(e), e.Requests, e.Rejected))
			if e.Error != 0 || e.RequestsError != 0 || e.RejectedError != 0 {
				t.Errorf("%+v: errors without any value evicted", e)
			}
		}
		if s := strings.Join(got, ", "); s != tt.want {
			t.Errorf("%+v:\n got %s\nwant %s", tt.q, s, tt.want)
		}
		if ans.Window != tt.q.Window || ans.By != tt.q.By || ans.Instances != 1 || ans.Partial {
			t.Errorf("%+v: answer %+v", tt.q, ans)
		}
	}
	for _, q := range []Query{{Window: 3}, {By: 2}, {Limit: -1}} {
		if _, err := r.Top(context.Background(), q); err == nil || !strings.Contains(err.Error(), "invalid query") {
			t.Errorf("%+v: error %v", q, err)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Window
		err  string
	}{{"", FiveMinutes, ""}, {"1m", Minute, ""}, {"5m", FiveMinutes, ""}, {"1h", Hour, ""},
		{"10m", 0, `invalid query: unknown window "10m" (want 1m, 5m or 1h)`}} {
		w, err := ParseWindow(tt.in)
		if (err == nil && tt.err != "") || (err != nil && err.Error() != tt.err) || w != tt.want {
			t.Errorf("ParseWindow(%q) = %v, %v", tt.in, w, err)
		}
		if err == nil && tt.in != "" && w.String() != tt.in {
			t.Errorf("%v.String() = %q", w, w.String())
		}
	}
	for _, tt := range []struct {
		in   string
		want By
		err  string
	}{{"", ByRejected, ""}, {"rejected", ByRejected, ""}, {"requests", ByRequests, ""},
		{"hits", 0, `invalid query: unknown order "hits" (want rejected or requests)`}} {
		b, err := ParseBy(tt.in)
		if (err == nil && tt.err != "") || (err != nil && err.Error() != tt.err) || b != tt.want {
			t.Errorf("ParseBy(%q) = %v, %v", tt.in, b, err)
		}
	}
	if _, err := New(Options{Capacity: -1}); err == nil {
		t.Error("New accepts a negative capacity")
	}
}

// TestRules checks the rates and the hottest value's ratio.
func TestRules(t *testing.T) {
	c := &clock{t: t0.Add(-time.Hour)}
	r := newRecorder(t, 8, c, nil)
	h := r.Rule("api", "api_key", "per_key", perMinute) // 100 a minute
	// Over the 60 s before t0+60s (slots 0 to 5 finished, 6 live but
	// empty): "hot" 150 a minute, "cool" 30, rejected.
	for s := range 60 {
		now := t0.Add(time.Duration(s) * time.Second)
		for range 2 {
			h.Observe(now, client("hot"), 1, false)
		}
		if s%2 == 0 {
			h.Observe(now, client("cool"), 1, true)
			h.Observe(now, client("hot"), 1, false)
		}
	}
	c.Set(t0.Add(60 * time.Second))
	ans := r.Rules(context.Background(), RulesQuery{})
	if len(ans.Rules) != 1 || ans.Instances != 1 {
		t.Fatalf("%+v", ans)
	}
	st := ans.Rules[0]
	// The 1m window covers the 6 slots before the live one: t0 to
	// t0+60s.
	if st.Decisions1m != 180.0/60 || st.Rejections1m != 30.0/60 {
		t.Errorf("rates %v and %v a second, want 3 and 0.5", st.Decisions1m, st.Rejections1m)
	}
	if len(st.Hottest) != 1 || st.Hottest[0].Value != "hot" || st.HottestHits != 150 || st.HottestRatio != 1.5 {
		t.Errorf("hottest %v with %v hits, ratio %v; want hot, 150, 1.5", st.Hottest, st.HottestHits, st.HottestRatio)
	}
	if st.RequestsPerUnit != 100 || st.Period != time.Minute {
		t.Errorf("limit %d per %v", st.RequestsPerUnit, st.Period)
	}
	// The 5m window starts 5 minutes before the minute being filled.
	if want := 180.0 / 300; st.Decisions5m != want {
		t.Errorf("5m rate %v, want %v", st.Decisions5m, want)
	}
}

// TestConcurrent records from several goroutines while snapshots are
// taken, for the race detector, and checks that nothing is lost.
func TestConcurrent(t *testing.T) {
	c := &clock{t: t0}
	r := newRecorder(t, 4, c, nil)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			h := r.Rule("api", "api_key", "per_key", perMinute)
			for i := range 2000 {
				h.Observe(c.Now(), client(fmt.Sprint(g, i%7)), 1, i%2 == 0)
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			r.Snapshot()
		}
	})
	wg.Wait()
	ans := r.Rules(context.Background(), RulesQuery{})
	if len(ans.Rules) != 1 {
		t.Fatalf("%+v", ans)
	}
	snap := r.Snapshot()
	if got := snap.Rules[0].windows[Minute].req.total; got != 8000 {
		t.Errorf("counted %d requests, want 8000", got)
	}
}

// TestSpaceSavingTable checks the slot table through 200 000 updates
// of random values, many evicting others: every slot is found by its
// value, no value has two slots, and the counts add up to the total.
func TestSpaceSavingTable(t *testing.T) {
	s := newSpaceSaving(16, maphash.MakeSeed())
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200_000 {
		key := []byte(strconv.Itoa(rng.IntN(40)))
		s.add(key, maphash.Bytes(s.seed, key), 1+rng.Uint64N(3))
		if i%997 != 0 {
			continue
		}
		used := 0
		for _, v := range s.table {
			if v != 0 {
				used++
			}
		}
		seen := map[string]bool{}
		var sum uint64
		for n := range s.slots {
			sl := &s.slots[n]
			if seen[sl.key] || s.find([]byte(sl.key), sl.hash) != int32(n) {
				t.Fatalf("after %d updates: slot %d (%q) is not found, or twice", i, n, sl.key)
			}
			seen[sl.key] = true
			sum += sl.count
		}
		if used != len(s.slots) || sum != s.total {
			t.Fatalf("after %d updates: %d table entries for %d slots, counts %d of %d", i, used, len(s.slots), sum, s.total)
		}
	}
}
