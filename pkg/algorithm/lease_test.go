package algorithm_test

import (
	"math/rand/v2"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/algorithm/algorithmtest"
)

// TestLeaseVectors runs the shared lease vectors through Reserve, Return and
// Apply, carrying each vector's state from step to step.
func TestLeaseVectors(t *testing.T) {
	for _, v := range algorithmtest.LeaseVectors() {
		t.Run(v.Name, func(t *testing.T) {
			var s algorithm.State
			leases := make([]algorithm.Lease, len(v.Steps))
			for i, step := range v.Steps {
				now := v.Start + step.At.Microseconds()
				switch step.Op {
				case algorithmtest.OpHit:
					l := v.Limit
					if step.Always {
						l.Charge = algorithm.ChargeAlways
					}
					next, got := algorithm.Apply(l, s, now, step.Cost)
					if got != step.Hit {
						t.Fatalf("step %d at %v, cost %d:\n got  %+v\n want %+v", i, step.At, step.Cost, got, step.Hit)
					}
					if got.Allowed || step.Always {
						s = next
					}
				case algorithmtest.OpReserve:
					next, got := algorithm.Reserve(v.Limit, s, now, step.Want, step.Lifetime.Microseconds())
					want := step.Lease
					if want.Hits > 0 {
						want.Window += v.Start
						want.Until += v.Start
					}
					if got != want {
						t.Fatalf("step %d at %v, reserve %d:\n got  %+v\n want %+v", i, step.At, step.Want, got, want)
					}
					s, leases[i] = next, got
				case algorithmtest.OpReturn:
					s = algorithm.Return(v.Limit, s, now, leases[step.Of], step.Unspent)
				}
			}
		})
	}
}

// TestLeasesNeverExceedTheLimit lets three holders lease from one counter,
// spend their leases at random instants before they end and give back the
// rest, while strict hits arrive too, and checks each algorithm's
// guarantee on every hit admitted: a window's hits never exceed Requests, a
// sliding-window estimate of the hits admitted never does either, and a
// bucket admits in any interval of length d at most what the strict bucket
// admits in d plus the lease lifetime.
func TestLeasesNeverExceedTheLimit(t *testing.T) {
	for _, l := range []algorithm.Limit{
		limit(algorithm.FixedWindow, 20, 0, 1e6),
		limit(algorithm.SlidingWindowCounter, 20, 0, 1e6),
		limit(algorithm.TokenBucket, 20, 5, 1e6),
	} {
		t.Run(describe(l), func(t *testing.T) {
			const lifetime = 200_000
			rng := rand.New(rand.NewPCG(7, uint64(l.Kind)))
			type holder struct {
				lease algorithm.Lease
				spent int64
			}
			var s algorithm.State
			holders := make([]holder, 3)
			var admitted []int64 // µs of every admitted hit, ascending
			now := int64(t0)
			for range 20000 {
				now += rng.Int64N(l.Period / 50)
				for i := range holders {
					h := &holders[i]
					// A holder may give back late, but spends nothing then.
					if h.lease.Hits > 0 && now >= h.lease.Until && rng.IntN(4) == 0 {
						s = algorithm.Return(l, s, now, h.lease, h.lease.Hits-h.spent)
						*h = holder{}
					}
				}
				i := rng.IntN(len(holders) + 1)
				if i == len(holders) { // a strict hit
					if next, v := algorithm.Apply(l, s, now, 1); v.Allowed {
						s = next
						admitted = append(admitted, now)
					}
					continue
				}
				h := &holders[i]
				if h.lease.Hits > 0 && now >= h.lease.Until {
					continue
				}
				if h.spent == h.lease.Hits {
					if h.lease.Hits > 0 {
						s = algorithm.Return(l, s, now, h.lease, 0)
					}
					var lease algorithm.Lease
					s, lease = algorithm.Reserve(l, s, now, 1+rng.Int64N(8), lifetime)
					*h = holder{lease: lease}
				}
				// Spending is slower than leasing, so leases often end
				// with hits unspent.
				if h.spent < h.lease.Hits && rng.IntN(3) == 0 {
					h.spent++
					admitted = append(admitted, now)
				}
			}
			if breach := algorithmtest.Breach(l, admitted, lifetime); breach != "" {
				t.Fatal(breach)
			}
		})
	}
}
