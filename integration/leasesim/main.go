// Command leasesim simulates leased budgets across regions: each region's
// store leases hits from one global counter, a network delay away, and
// spends them on its own traffic. It reports, for delays of 1, 20 and 100
// ms between regions, the overage (hits admitted past the limit, which
// leases must keep at 0), the false rejections (requests rejected in a
// window that ended with room left, as a share of the requests the limit
// allowed) and the global store's calls per decision.
//
// The model, in virtual time: Poisson arrivals per region; a region decides
// a request from the leases it holds, or, when they are empty, waits up to
// the request's deadline for a renewal in flight and rejects it after; it
// renews ahead of need, asking for its recent rate times the renewal
// interval plus the delay, at most its share of what the counter had left
// at the last grant; a grant of nothing marks the counter over until the
// retry time the global store gave; unspent hits go back when a lease
// ends. A window's leases end with the window, so a region asks for the
// next window's lease ahead, timed to reach the global store as the window
// begins. Grants and returns are algorithm.Reserve and algorithm.Return on
// the global counter, applied when the message arrives.
//
// Run it with `go run ./integration/leasesim`.
package main

import (
	"container/heap"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

func main() {
	seconds := flag.Int("seconds", 60, "simulated seconds per run")
	flag.Parse()
	fmt.Println("| algorithm | load | delay | decisions | overage | false rejections | global calls per decision |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, kind := range []algorithm.Kind{algorithm.FixedWindow, algorithm.SlidingWindowCounter, algorithm.TokenBucket} {
		for _, load := range []float64{0.8, 1.5} {
			for _, delay := range []time.Duration{time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond} {
				r := simulate(config{
					limit:   algorithm.Limit{Kind: kind, Requests: 10_000, Period: 1e6},
					shares:  []float64{0.5, 0.3, 0.2},
					load:    load,
					delay:   delay.Microseconds(),
					seconds: *seconds,
					seed:    1,
				})
				fmt.Printf("| %v | %.1f× | %v | %d | %d | %.3f %% | %.4f |\n",
					kind, load, delay, r.decisions, r.overage, 100*r.falseRate(), r.callsPerDecision())
				if r.overage != 0 {
					fmt.Fprintln(os.Stderr, "leasesim: overage: leases admitted more than the limit")
					os.Exit(1)
				}
			}
		}
	}
}

// config is one simulation.
type config struct {
	limit   algorithm.Limit
	shares  []float64 // each region's share of the traffic
	load    float64   // offered traffic as a multiple of the limit
	delay   int64     // µs, one way, between a region and the global store
	seconds int
	seed    uint64
}

const (
	renewEvery = 100_000 // µs of demand a lease is sized for
	deadline   = 20_000  // µs a request waits for a renewal in flight
	lifetime   = 500_000 // µs a token-bucket lease lasts
)

// result is what one simulation measured.
type result struct {
	decisions, admitted int64
	overage             int64 // hits admitted past the limit
	falseRejections     int64
	allowed             int64 // requests the limit allowed: per window, min(offered, limit)
	calls               int64 // messages to the global store
}

func (r result) falseRate() float64 { return float64(r.falseRejections) / float64(max(r.allowed, 1)) }

func (r result) callsPerDecision() float64 { return float64(r.calls) / float64(max(r.decisions, 1)) }

// region is one region's store: its leases and its view of the counter.
type region struct {
	rate      float64 // arrivals per µs
	leases    []lease
	inflight  bool
	over      int64   // µs until which the counter is known over
	remaining int64   // the counter's Remaining at the last grant
	recent    float64 // estimated arrivals per µs
	count     int64   // arrivals since since
	since     int64
	waiting   []int64 // arrival times of requests waiting for a renewal
	prefetch  int64   // the window whose lease was asked for ahead
}

type lease struct {
	algorithm.Lease
	spent int64
}

// event is something that happens at a virtual instant.
type event struct {
	at     int64
	kind   int // arrive, grant (at the global store), granted (back at the region), give back
	region int
	want   int64
	lease  lease
	ahead  bool // a lease asked for ahead of its window
}

const (
	evArrive = iota
	evReserve
	evGranted
	evReturn
)

type queue []event

func (q queue) Len() int           { return len(q) }
func (q queue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q queue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)        { *q = append(*q, x.(event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simulate runs one configuration.
func simulate(c config) result {
	rng := rand.New(rand.NewPCG(c.seed, uint64(c.delay)))
	start := int64(1_750_000_000_000_000)
	end := start + int64(c.seconds)*1e6
	total := c.load * float64(c.limit.Requests) / float64(c.limit.Period)
	regions := make([]region, len(c.shares))
	q := &queue{}
	for i, share := range c.shares {
		regions[i] = region{rate: total * share, remaining: c.limit.Requests, since: start}
		heap.Push(q, event{at: start + int64(rng.ExpFloat64()/regions[i].rate), kind: evArrive, region: i})
	}
	var global algorithm.State
	var res result
	// Per window: requests offered and admitted, and rejections.
	type tally struct{ offered, admitted, rejected int64 }
	windows := map[int64]*tally{}
	window := func(at int64) *tally {
		w := at - at%c.limit.Period
		if windows[w] == nil {
			windows[w] = &tally{}
		}
		return windows[w]
	}
	// decide counts a request that arrived at arrival and was decided at
	// now: offered and rejected in its arrival's window, admitted in the
	// window it was admitted in.
	decide := func(arrival, now int64, admitted bool) {
		res.decisions++
		window(arrival).offered++
		if admitted {
			res.admitted++
			window(now).admitted++
		} else {
			window(arrival).rejected++
		}
	}
	// spend admits one hit from the region's leases, earliest end first.
	spend := func(r *region, at int64) bool {
		for i := range r.leases {
			l := &r.leases[i]
			if at < l.Until && l.spent < l.Hits {
				l.spent++
				return true
			}
		}
		return false
	}
	held := func(r *region, at int64) int64 {
		var n int64
		for _, l := range r.leases {
			if at < l.Until {
				n += l.Hits - l.spent
			}
		}
		return n
	}
	renew := func(i int, at int64) {
		r := &regions[i]
		if r.inflight || at < r.over {
			return
		}
		// Enough for the recent rate until the next renewal arrives, but
		// no more than a window's lease can be spent before it ends, nor
		// than a share of what the counter has left.
		horizon := int64(renewEvery + 2*c.delay)
		if c.limit.Kind != algorithm.TokenBucket {
			horizon = min(horizon, c.limit.Period-(at+c.delay)%c.limit.Period)
		}
		want := max(int64(math.Ceil(r.recent*float64(horizon))), int64(len(r.waiting))+1)
		want = max(1, min(want, r.remaining/int64(len(regions))))
		r.inflight = true
		res.calls++
		heap.Push(q, event{at: at + c.delay, kind: evReserve, region: i, want: want})
	}

	for q.Len() > 0 {
		e := heap.Pop(q).(event)
		if e.at >= end {
			break
		}
		r := &regions[e.region]
		switch e.kind {
		case evArrive:
			// The region's recent rate: arrivals per renewEvery, averaged
			// with the previous intervals'.
			r.count++
			if span := e.at - r.since; span >= renewEvery {
				r.recent = (r.recent + float64(r.count)/float64(span)) / 2
				r.count, r.since = 0, e.at
			}
			heap.Push(q, event{at: e.at + int64(rng.ExpFloat64()/r.rate) + 1, kind: evArrive, region: e.region})

			// Return what has ended.
			kept := r.leases[:0]
			for _, l := range r.leases {
				if e.at >= l.Until {
					if l.spent < l.Hits {
						res.calls++
						heap.Push(q, event{at: e.at + c.delay, kind: evReturn, region: e.region, lease: l})
					}
					continue
				}
				kept = append(kept, l)
			}
			r.leases = kept
			switch {
			case spend(r, e.at):
				decide(e.at, e.at, true)
			case e.at < r.over:
				decide(e.at, e.at, false)
			default:
				r.waiting = append(r.waiting, e.at)
			}
			if held(r, e.at) < int64(math.Ceil(r.recent*float64(2*c.delay+renewEvery/4)))+1 {
				renew(e.region, e.at)
			}
			// A window's leases end with it: ask for the next window's
			// ahead, timed to reach the global store as it begins.
			if next := e.at - e.at%c.limit.Period + c.limit.Period; c.limit.Kind != algorithm.TokenBucket &&
				r.prefetch != next && next-e.at <= c.delay+renewEvery/4 {
				r.prefetch = next
				want := int64(math.Ceil(r.recent * float64(min(renewEvery+2*c.delay, c.limit.Period))))
				want = max(1, min(want, c.limit.Requests/int64(len(regions))))
				res.calls++
				heap.Push(q, event{at: max(e.at+c.delay, next), kind: evReserve, region: e.region, want: want, ahead: true})
			}
			// Requests past their deadline are rejected.
			waiting := r.waiting[:0]
			for _, at := range r.waiting {
				if e.at-at >= deadline || e.at < r.over {
					decide(at, e.at, false)
					continue
				}
				waiting = append(waiting, at)
			}
			r.waiting = waiting
		case evReserve:
			var l algorithm.Lease
			life := int64(lifetime)
			if c.limit.Kind != algorithm.TokenBucket {
				life = c.limit.Period // a window's lease lasts until the window ends
			}
			global, l = algorithm.Reserve(c.limit, global, e.at, e.want, life)
			heap.Push(q, event{at: e.at + c.delay, kind: evGranted, region: e.region, lease: lease{Lease: l}, ahead: e.ahead})
		case evGranted:
			if !e.ahead {
				r.inflight = false
			}
			r.remaining = e.lease.Verdict.Remaining
			if e.lease.Hits == 0 {
				r.over = e.at + e.lease.Verdict.RetryAfter.Microseconds()
			} else {
				r.leases = append(r.leases, e.lease)
			}
			waiting := r.waiting[:0]
			for _, at := range r.waiting {
				switch {
				case spend(r, e.at):
					decide(at, e.at, true)
				case e.at-at >= deadline || e.at < r.over:
					decide(at, e.at, false)
				default:
					waiting = append(waiting, at)
				}
			}
			r.waiting = waiting
			if len(r.waiting) > 0 {
				renew(e.region, e.at)
			}
		case evReturn:
			global = algorithm.Return(c.limit, global, e.at, e.lease.Lease, e.lease.Hits-e.lease.spent)
		}
	}

	for w, t := range windows {
		if w+c.limit.Period > end {
			continue // the last window is cut short
		}
		// A window admits at most Requests; a bucket's window may also
		// take the burst and what refills over a lease's lifetime.
		most := c.limit.Requests
		if c.limit.Kind == algorithm.TokenBucket {
			most = c.limit.Capacity() + c.limit.Requests*(c.limit.Period+lifetime)/c.limit.Period
		}
		res.overage += max(0, t.admitted-most)
		res.allowed += min(t.offered, c.limit.Requests)
		if t.admitted < c.limit.Requests {
			res.falseRejections += min(t.rejected, c.limit.Requests-t.admitted)
		}
	}
	return res
}
