package algorithmtest

import (
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// LeaseVector is a scenario of leases on one counter: reservations,
// returns and plain hits, applied in order, each at an exact instant.
type LeaseVector struct {
	// Name is unique and begins with the algorithm's configuration name.
	Name  string
	Limit algorithm.Limit
	// Start is the µs timestamp that step offsets count from.
	Start int64
	Steps []LeaseStep
}

// LeaseOp is what a LeaseStep does.
type LeaseOp uint8

// The operations of a LeaseStep.
const (
	// OpHit applies a hit of Cost and expects Hit.
	OpHit LeaseOp = iota
	// OpReserve reserves a lease of at most Want hits lasting at most
	// Lifetime, and expects Lease.
	OpReserve
	// OpReturn gives back Unspent hits of the lease granted at step Of.
	OpReturn
)

// LeaseStep is one operation at Start+At. Each operation sees the counter
// as the earlier steps left it.
type LeaseStep struct {
	At time.Duration
	Op LeaseOp

	Cost int64
	// Always charges the hit with algorithm.ChargeAlways.
	Always bool
	Hit    algorithm.Verdict

	Want     int64
	Lifetime time.Duration
	// Lease is the lease expected, its Window and Until as offsets from
	// the vector's Start in µs unless Hits is 0.
	Lease algorithm.Lease

	Of      int
	Unspent int64
}

// LeaseVectors returns the lease vectors, a fresh copy on every call,
// worked out by hand from the formulas of package algorithm.
func LeaseVectors() []LeaseVector {
	const s1 = int64(sec / us) // one second in µs
	return []LeaseVector{
		{
			// The window ends 750 ms after the first step.
			Name: "fixed_window/lease", Limit: fixedWindow(10, sec), Start: Start + 250_000,
			Steps: []LeaseStep{
				reserve(0, 4, sec, lease(4, -250_000, s1-250_000, ok(10, 6, 750*ms))),
				hit(0, 5, ok(10, 1, 750*ms)),
				// Only one hit is left.
				reserve(0, 4, sec, lease(1, -250_000, s1-250_000, ok(10, 0, 750*ms))),
				reserve(0, 1, sec, lease(0, 0, 0, no(10, 0, 750*ms, 750*ms))),
				giveBack(0, 0, 3),
				hit(0, 0, ok(10, 3, 750*ms)),
				// The window has ended: its hits count no more.
				giveBack(750*ms, 2, 1),
				hit(750*ms, 0, ok(10, 10, 0)),
			},
		},
		{
			// 10 per second: one token is 100 ms of credit.
			Name: "token_bucket/lease", Limit: tokenBucket(10, 0, sec), Start: Start,
			Steps: []LeaseStep{
				reserve(0, 4, 200*ms, lease(4, 0, 200_000, ok(10, 6, 400*ms))),
				reserve(0, 10, 200*ms, lease(6, 0, 200_000, ok(10, 0, sec))),
				reserve(0, 1, 200*ms, lease(0, 0, 0, no(10, 0, sec, 100*ms))),
				// Half a token has refilled; 4 come back.
				giveBack(50*ms, 0, 4),
				hit(50*ms, 0, ok(10, 4, 550*ms)),
			},
		},
		{
			Name: "sliding_window_counter/lease", Limit: slidingCounter(10, sec), Start: Start,
			Steps: []LeaseStep{
				reserve(0, 6, 2*sec, lease(6, 0, s1, ok(10, 4, 2*sec))),
				// The lease's window is now the previous one: 4 unspent
				// hits leave its count, which still weighs.
				giveBack(sec, 0, 4),
				hit(sec, 0, ok(10, 8, sec)),
				reserve(sec, 20, 2*sec, lease(8, s1, 2*s1, ok(10, 0, 2*sec))),
				// Half the previous window's weight is gone: room for one.
				reserve(1500*ms, 5, 2*sec, lease(1, s1, 2*s1, ok(10, 0, 1500*ms))),
				// Two windows on, nothing is given back.
				giveBack(3*sec, 3, 8),
				hit(3*sec, 0, ok(10, 10, 0)),
			},
		},
		{
			// A counter past its limit grants nothing.
			Name: "fixed_window/lease_past_the_limit", Limit: fixedWindow(3, sec), Start: Start,
			Steps: []LeaseStep{
				{At: 0, Op: OpHit, Cost: 5, Always: true, Hit: no(3, 0, sec, sec)},
				reserve(0, 1, sec, lease(0, 0, 0, no(3, 0, sec, sec))),
			},
		},
		{
			// A sliding-window log is never leased.
			Name: "sliding_window_log/no_lease", Limit: slidingLog(3, sec), Start: Start,
			Steps: []LeaseStep{
				reserve(0, 2, sec, lease(0, 0, 0, ok(3, 3, 0))),
				hit(0, 1, ok(3, 2, sec)),
			},
		},
	}
}

func hit(at time.Duration, cost int64, want algorithm.Verdict) LeaseStep {
	return LeaseStep{At: at, Op: OpHit, Cost: cost, Hit: want}
}

func reserve(at time.Duration, want int64, lifetime time.Duration, l algorithm.Lease) LeaseStep {
	return LeaseStep{At: at, Op: OpReserve, Want: want, Lifetime: lifetime, Lease: l}
}

func giveBack(at time.Duration, of int, unspent int64) LeaseStep {
	return LeaseStep{At: at, Op: OpReturn, Of: of, Unspent: unspent}
}

// lease is an expected Lease, window and until as offsets in µs.
func lease(hits, window, until int64, v algorithm.Verdict) algorithm.Lease {
	return algorithm.Lease{Hits: hits, Window: window, Until: until, Verdict: v}
}
