package cached_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/algorithm/algorithmtest"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/cached"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
)

// event is one decision of the fleet.
type event struct {
	at       int64 // µs
	instance int
	allowed  bool
}

// fleetRun is the outcome of a fleet scenario.
type fleetRun struct {
	events []event // in the order decisions completed
	// killedHeld is what the killed instance held when it died.
	killedHeld int64
	killedAt   int64
	// local and io count the decisions made without and with a call to
	// the shared counter; calls the Leaser calls.
	local, io int64
	// left is what the shared counter had left at endAt, once every
	// instance had closed (the killed one giving nothing back).
	left, endAt int64
}

// scenario is steady traffic from goroutines spread over instances.
type scenario struct {
	limit algorithm.Limit
	// weights split the goroutines over the instances.
	weights []int
	// load is the offered rate as a multiple of the limit.
	load    float64
	periods int
	// kill abandons the last instance without Close at this fraction of
	// the run: its leases are never returned.
	kill float64
}

const lifetime = 500 * time.Millisecond

// runFleet runs s on three cached stores over one memory store, inside a
// synctest bubble, and returns every decision.
func runFleet(t *testing.T, sc scenario) fleetRun {
	var run fleetRun
	synctest.Test(t, func(t *testing.T) {
		// Start on a window boundary.
		time.Sleep(time.Until(time.Now().Truncate(time.Duration(sc.limit.Period) * time.Microsecond).Add(time.Duration(sc.limit.Period) * time.Microsecond)))
		m := memory.New(memory.Options{Now: time.Now})
		var fleet []*cached.Store
		var dead []*deadLeaser
		for range sc.weights {
			d := &deadLeaser{Store: m}
			s := cached.New(cached.Options{Inner: m, Leaser: d, Lifetime: lifetime})
			fleet, dead = append(fleet, s), append(dead, d)
		}
		const goroutinesPerWeight = 4
		var total int
		for _, w := range sc.weights {
			total += w * goroutinesPerWeight
		}
		period := time.Duration(sc.limit.Period) * time.Microsecond
		// Each goroutine offers an equal share of load × Requests per period.
		gap := time.Duration(float64(period) * float64(total) / (sc.load * float64(sc.limit.Requests)))
		end := time.Now().Add(time.Duration(sc.periods) * period)
		killAt := time.Now().Add(time.Duration(sc.kill * float64(sc.periods) * float64(period)))
		var killed atomic.Bool
		var mu sync.Mutex
		var wg sync.WaitGroup
		g := 0
		for inst, w := range sc.weights {
			for range w * goroutinesPerWeight {
				g++
				rng := rand.New(rand.NewPCG(uint64(g), uint64(sc.limit.Requests)))
				wg.Go(func() {
					h := []store.Hit{{Domain: "fleet", Entries: []store.Entry{{Key: "k", Value: "shared"}}, Limit: sc.limit, Cost: 1, Cached: true}}
					v := make([]algorithm.Verdict, 1)
					// Start at a random phase so goroutines do not move in step.
					time.Sleep(time.Duration(rng.Int64N(int64(gap))))
					for i := 0; i < 1_000_000 && time.Now().Before(end); i++ {
						if inst == len(fleet)-1 && killed.Load() {
							return
						}
						if err := fleet[inst].Apply(context.Background(), h, v); err != nil {
							t.Errorf("instance %d: %v", inst, err)
							return
						}
						e := event{at: algorithm.Micros(time.Now()), instance: inst, allowed: v[0].Allowed}
						mu.Lock()
						run.events = append(run.events, e)
						mu.Unlock()
						// Exponential gaps: steady Poisson traffic.
						time.Sleep(time.Duration(rng.ExpFloat64() * float64(gap)))
					}
				})
			}
		}
		if sc.kill > 0 {
			time.Sleep(time.Until(killAt))
			killed.Store(true)
			dead[len(dead)-1].dead.Store(true)
			synctest.Wait()
			run.killedHeld = fleet[len(fleet)-1].Unspent()
			run.killedAt = algorithm.Micros(time.Now())
		}
		wg.Wait()
		for _, s := range fleet {
			local, io := s.Decisions()
			run.local += local
			run.io += io
			_ = s.Close(context.Background())
		}
		check := sc.limit
		check.Charge = algorithm.ChargeAdmitted
		v := make([]algorithm.Verdict, 1)
		h := []store.Hit{{Domain: "fleet", Entries: []store.Entry{{Key: "k", Value: "shared"}}, Limit: check}}
		if err := m.Apply(context.Background(), h, v); err != nil {
			t.Fatal(err)
		}
		run.left, run.endAt = v[0].Remaining, algorithm.Micros(time.Now())
	})
	return run
}

// deadLeaser passes calls to the shared counter until dead is set, and
// then drops them, as a killed instance would never make them.
type deadLeaser struct {
	*memory.Store
	dead atomic.Bool
}

func (d *deadLeaser) Return(ctx context.Context, returns []store.LeaseReturn) error {
	if d.dead.Load() {
		return nil
	}
	return d.Store.Return(ctx, returns)
}

// judge checks the fleet's admissions against the limit's guarantee and
// counts false rejections: rejections of hits the strict algorithm would
// have admitted given what the fleet had admitted so far.
func judge(t *testing.T, l algorithm.Limit, events []event) (admitted, falseRejections int) {
	t.Helper()
	var sim algorithm.State
	var times []int64
	always := l
	always.Charge = algorithm.ChargeAlways
	for _, e := range events {
		if e.allowed {
			admitted++
			times = append(times, e.at)
			// A bucket lease may be spent after the strict bucket would
			// have: charge it anyway.
			sim, _ = algorithm.Apply(always, sim, e.at, 1)
			continue
		}
		if _, v := algorithm.Apply(l, sim, e.at, 1); v.Allowed {
			falseRejections++
		}
	}
	slices.Sort(times)
	if breach := algorithmtest.Breach(l, times, bucketSlack(l, events)); breach != "" {
		t.Fatal(breach)
	}
	return admitted, falseRejections
}

// strictlyAdmitted returns how many of the hits of events the strict
// algorithm admits, deciding each at its instant: the capacity a
// saturated counter is judged by.
func strictlyAdmitted(l algorithm.Limit, events []event) int {
	sorted := slices.Clone(events)
	slices.SortStableFunc(sorted, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	var sim algorithm.State
	n := 0
	for _, e := range sorted {
		var v algorithm.Verdict
		if sim, v = algorithm.Apply(l, sim, e.at, 1); v.Allowed {
			n++
		}
	}
	return n
}

// bucketSlack is the refill, in µs, of the most tokens the instances of
// events can hold leased and unspent at once: two grants each, each at
// most a 64th of the bucket (none below 256 tokens left, where nothing is
// leased). The package's guarantee is that the fleet admits at most what
// the strict bucket admits plus those; with leases that live up to 30 s
// it is tighter than the bound of a lease's lifetime, which it replaces.
func bucketSlack(l algorithm.Limit, events []event) int64 {
	if l.Kind != algorithm.TokenBucket || l.Capacity() < 256 {
		return 0
	}
	instances := map[int]bool{}
	for _, e := range events {
		instances[e.instance] = e.instance >= 0 // -1: a strict client
	}
	delete(instances, -1)
	tokens := int64(len(instances)) * 2 * (l.Capacity() / 64)
	return tokens * l.Period / l.Requests
}

func TestFleetNeverExceedsTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet scenarios take a while")
	}
	kinds := []algorithm.Kind{algorithm.FixedWindow, algorithm.SlidingWindowCounter, algorithm.TokenBucket}
	for _, kind := range kinds {
		for _, requests := range []int64{5, 100, 10_000} {
			for _, split := range []struct {
				name    string
				weights []int
			}{{"even", []int{1, 1, 1}}, {"uneven", []int{6, 3, 1}}} {
				for _, load := range []float64{0.8, 1.5} {
					name := fmt.Sprintf("%s/%d/%s/load%.1f", kind, requests, split.name, load)
					t.Run(name, func(t *testing.T) {
						l := algorithm.Limit{Kind: kind, Requests: requests, Period: second}
						periods := 6
						if requests >= 10_000 {
							periods = 3
						}
						run := runFleet(t, scenario{limit: l, weights: split.weights, load: load, periods: periods})
						admitted, falses := judge(t, l, run.events)
						rate := float64(falses) / float64(max(admitted, 1))
						capacity := float64(admitted) / float64(max(strictlyAdmitted(l, run.events), 1))
						t.Logf("RESULT %s decisions=%d admitted=%d false=%d rate=%.4f%% capacity=%.2f%% local=%.1f%%", name, len(run.events), admitted, falses, 100*rate,
							100*capacity, 100*float64(run.local)/float64(run.local+run.io))
						switch {
						case load > 1 && capacity < 0.995:
							// A saturated counter is judged by capacity.
							t.Errorf("admitted %.2f%% of what the strict algorithm admits for this demand, want at least 99.5%%", 100*capacity)
						case load <= 1 && rate >= 0.001:
							// Below 0.1 %, which for the smaller limits
							// means none at all.
							t.Errorf("false rejections %.4f%% of admitted hits, want below 0.1%%", 100*rate)
						}
					})
				}
			}
		}
	}
}

// TestKilledHolder abandons an instance holding leases, without Close and
// without ever returning them: the fleet still never exceeds the limit,
// and the capacity lost (hits the limit allowed that were rejected) is at
// most what the dead instance held.
func TestKilledHolder(t *testing.T) {
	l := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 10_000, Period: second}
	run := runFleet(t, scenario{limit: l, weights: []int{1, 1, 1}, load: 1.5, periods: 3, kill: 0.4})
	if run.killedHeld == 0 {
		t.Fatal("the killed instance held nothing")
	}
	admitted, falses := judge(t, l, run.events)
	perWindow := map[int64]int64{}
	rejections := map[int64]int64{}
	for _, e := range run.events {
		w := e.at - e.at%l.Period
		if e.allowed {
			perWindow[w]++
		} else {
			rejections[w]++
		}
	}
	var lost int64
	for w, n := range rejections {
		lost += min(n, l.Requests-perWindow[w])
	}
	t.Logf("killed holding %d hits; %d admitted, %d hits of capacity lost, %d rejections while the fleet was under the limit", run.killedHeld, admitted, lost, falses)
	if lost > run.killedHeld {
		t.Fatalf("%d hits of capacity lost, more than the %d the killed instance held", lost, run.killedHeld)
	}
}

// TestKilledBucketHolder is TestKilledHolder on a token bucket: the hits
// the killed instance held stay taken from the bucket, so the capacity
// lost (what a strict bucket charged with the fleet's admissions would
// have left at the end, less what the shared bucket has left) is at most
// what it held.
func TestKilledBucketHolder(t *testing.T) {
	l := algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 10_000, Period: second}
	run := runFleet(t, scenario{limit: l, weights: []int{1, 1, 1}, load: 1.5, periods: 3, kill: 0.4})
	if run.killedHeld == 0 {
		t.Fatal("the killed instance held nothing")
	}
	admitted, falses := judge(t, l, run.events)
	var sim algorithm.State
	always := l
	always.Charge = algorithm.ChargeAlways
	for _, e := range run.events {
		if e.allowed {
			sim, _ = algorithm.Apply(always, sim, e.at, 1)
		}
	}
	_, v := algorithm.Apply(l, sim, run.endAt, 0)
	lost := v.Remaining - run.left
	t.Logf("killed holding %d hits; %d admitted, %d hits of capacity lost (%d left, %d had the fleet admitted strictly), %d rejections while the bucket had room",
		run.killedHeld, admitted, lost, run.left, v.Remaining, falses)
	if lost < 0 || lost > run.killedHeld {
		t.Fatalf("%d hits of capacity lost, want between 0 and the %d the killed instance held", lost, run.killedHeld)
	}
}

// TestLongBucketLeasesStayWithinTheirBound has three instances take
// leases from a full bucket, which then live for seconds, drains the
// bucket strictly, and spends the leases: the fleet admits beyond the
// strict bucket, by no more than the tokens leased and unspent when the
// bucket was drained.
func TestLongBucketLeasesStayWithinTheirBound(t *testing.T) {
	l := algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 6400, Period: second}
	synctest.Test(t, func(t *testing.T) {
		m := memory.New(memory.Options{Now: time.Now})
		var fleet []*cached.Store
		for range 3 {
			s := cached.New(cached.Options{Inner: m, Leaser: m, Lifetime: lifetime})
			defer s.Close(context.Background())
			fleet = append(fleet, s)
		}
		hit := []store.Hit{{Domain: "fleet", Entries: []store.Entry{{Key: "k", Value: "shared"}}, Limit: l, Cost: 1, Cached: true}}
		var admitted []int64
		var events []event
		decide := func(i int, s store.Store, h []store.Hit) bool {
			v := make([]algorithm.Verdict, 1)
			if err := s.Apply(context.Background(), h, v); err != nil {
				t.Fatal(err)
			}
			if v[0].Allowed {
				admitted = append(admitted, algorithm.Micros(time.Now()))
			}
			events = append(events, event{at: algorithm.Micros(time.Now()), instance: i, allowed: v[0].Allowed})
			return v[0].Allowed
		}
		// A hit a second on each instance: seen twice, a counter of a
		// full bucket leases for its demand over 30 s.
		for range 3 {
			for i, s := range fleet {
				decide(i, s, hit)
			}
			time.Sleep(time.Second)
		}
		synctest.Wait()
		var held int64
		for _, s := range fleet {
			held += s.Unspent()
		}
		if held == 0 {
			t.Fatal("no lease held")
		}
		// Two seconds on, past the 500 ms of a lease from a half-full
		// bucket: drain the bucket strictly, then spend what is held.
		time.Sleep(2 * time.Second)
		strict := slices.Clone(hit)
		strict[0].Cached = false
		for decide(-1, m, strict) {
		}
		spent := 0
		for i, s := range fleet {
			for decide(i, s, hit) {
				spent++
			}
		}
		if spent == 0 {
			t.Fatalf("the fleet spent none of the %d tokens it held", held)
		}
		if b := algorithmtest.Breach(l, admitted, 0); b == "" {
			t.Fatal("the leases spent after the drain did not go past the strict bucket: the test shows nothing")
		}
		if most := bucketSlack(l, events) * l.Requests / l.Period; held > most {
			t.Fatalf("%d tokens held, more than the %d three instances may hold", held, most)
		}
		// The refill of the held tokens, rounded up.
		if b := algorithmtest.Breach(l, admitted, (held*l.Period+l.Requests-1)/l.Requests); b != "" {
			t.Fatalf("%d tokens held, %d spent after the drain: %s", held, spent, b)
		}
		t.Logf("%d tokens held for seconds, %d spent after the bucket was drained", held, spent)
	})
}
