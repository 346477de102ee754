package algorithm

import (
	"errors"
	"fmt"
	"math"
)

// Bounds that Validate enforces. They keep every timestamp the algorithms
// compute below 2^53 µs, so the Redis Lua port, whose numbers are doubles,
// holds them exactly until the year 2180.
const (
	// MaxRequests is the largest Requests, Envoy's uint32 requests_per_unit.
	MaxRequests = 1<<32 - 1
	// MaxBurst is the largest token-bucket Burst.
	MaxBurst = 1<<32 - 1
	// MaxPeriod is the longest Period, and the longest time a token bucket
	// may take to refill from empty: 2^50 µs, about 35.7 years.
	MaxPeriod = 1 << 50
	// MaxLogRequests is the largest Requests of a sliding-window log, which
	// stores one entry per admitted unit: 80 KB per key in memory at most,
	// and as many sorted-set members in Redis.
	MaxLogRequests = 10_000
	// MaxCount is the most a window counter holds when always-charged hits
	// take it past its limit: about 4.5·10^15, so a count plus any cost Lua
	// compares it with stays exact in a double.
	MaxCount = 1 << 52
	// MaxDebt is the deepest a token bucket's debt goes, in µs of refill,
	// whatever its period: MaxPeriod, so a theoretical arrival time stays
	// below 2^53 µs.
	MaxDebt = MaxPeriod
	// DebtPeriods is how many of its periods a token bucket's debt may
	// last at most (up to MaxDebt): one always-charged report, however
	// large, locks a client out for ten periods of its limit at most.
	DebtPeriods = 10
)

// Validate reports whether l is within the bounds the algorithms rely on:
// a known Kind, 1 ≤ Period ≤ MaxPeriod, 0 ≤ Requests ≤ MaxRequests (at most
// MaxLogRequests for a sliding-window log), 0 ≤ Burst ≤ MaxBurst and Burst
// only on a token bucket, and a token bucket that refills from empty within
// MaxPeriod: ⌈(Requests+Burst)·Period/Requests⌉ ≤ MaxPeriod.
//
// Verdicts are exact integers when, in addition, Capacity·Period < 2^53 (a
// token bucket) or Requests·Period < 2^53 (a sliding-window counter); past
// that one rounding step is taken, identically in Go and Lua.
func (l Limit) Validate() error {
	var errs []error
	if l.Kind < TokenBucket || l.Kind > SlidingWindowLog {
		errs = append(errs, fmt.Errorf("unknown algorithm %v", l.Kind))
	}
	if l.Period < 1 || l.Period > MaxPeriod {
		errs = append(errs, fmt.Errorf("period %dµs outside [1µs, %dµs]", l.Period, int64(MaxPeriod)))
	}
	maxRequests := int64(MaxRequests)
	if l.Kind == SlidingWindowLog {
		maxRequests = MaxLogRequests
	}
	if l.Requests < 0 || l.Requests > maxRequests {
		errs = append(errs, fmt.Errorf("requests %d outside [0, %d] for %v", l.Requests, maxRequests, l.Kind))
	}
	switch {
	case l.Burst < 0 || l.Burst > MaxBurst:
		errs = append(errs, fmt.Errorf("burst %d outside [0, %d]", l.Burst, int64(MaxBurst)))
	case l.Burst > 0 && l.Kind != TokenBucket:
		errs = append(errs, fmt.Errorf("burst applies only to %v, not %v", TokenBucket, l.Kind))
	}
	if len(errs) == 0 && l.Kind == TokenBucket && l.Requests > 0 {
		// Compared as a double: the quotient may not fit an int64.
		if refill := math.Ceil(float64(l.Capacity()) * float64(l.Period) / float64(l.Requests)); refill > MaxPeriod {
			errs = append(errs, fmt.Errorf("token bucket of %d refilling %d per %dµs takes %.0fµs to refill, more than %dµs",
				l.Capacity(), l.Requests, l.Period, refill, int64(MaxPeriod)))
		}
	}
	return errors.Join(errs...)
}
