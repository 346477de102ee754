package algorithm

import (
	"math"
	"time"
)

// State is the stored state of one counter; the zero State is a fresh key.
// Each algorithm uses only some of the fields; the others stay zero.
type State struct {
	// T is the token bucket's theoretical arrival time (the instant the
	// bucket is full again), or the start of the current window of the
	// fixed-window and sliding-window-counter algorithms, in µs.
	T int64
	// Cur counts the hits of the window that starts at T (fixed window,
	// sliding-window counter).
	Cur int64
	// Prev counts the hits of the window before it (sliding-window counter).
	Prev int64
	// Log holds the admission times of a sliding-window log in µs,
	// ascending, one per admitted unit of cost.
	Log []int64
}

// Apply decides a hit of the given cost against one counter at time now (µs
// since the epoch) and returns the counter's new state and the verdict.
// Apply is a pure function: stores keep the state, and the Redis store's Lua
// scripts reproduce it bit for bit (see Arithmetic below). What Remaining,
// ResetAfter and RetryAfter mean for each algorithm is documented on its
// implementation: applyTokenBucket, applyFixedWindow,
// applySlidingWindowCounter and applySlidingWindowLog.
//
// Rules shared by every algorithm:
//
//   - A cost above 0 is consumed if the hit is admitted.
//   - A cost of 0 checks without consuming: the hit is admitted iff a hit of
//     cost 1 would be admitted now, and the state never changes.
//   - A negative cost refunds -cost units and is always admitted. A refund
//     never takes a counter below empty (above full capacity).
//   - A rejected hit returns s itself: nothing is consumed. Apply never
//     writes to s.Log[:len(s.Log)]; an admitted sliding-window-log hit may
//     append into the spare capacity beyond it, which a caller holding s
//     cannot see.
//   - A hit whose cost exceeds the capacity (Requests, plus Burst for a token
//     bucket), and every hit with a cost of 0 or more when Requests is 0, is
//     rejected with RetryAfter set to one Period: no wait would admit it.
//   - Remaining is never negative, even when a counter holds more than a
//     lowered limit allows (a counter keeps its state when Requests or Burst
//     change).
//
// A hit of a Limit whose Charge is ChargeAlways is charged whatever the
// verdict, as envoyproxy/ratelimit charges every hit:
//
//   - A cost above 0 that the rules above would admit is admitted, with the
//     same state and verdict. Any other cost above 0, a cost above the
//     capacity included, is added all the same, taking the counter past its
//     limit (a window above Requests, a token bucket into debt), and the hit
//     is rejected with Remaining 0 and RetryAfter the time until the
//     counter is back at its limit. A counter past its limit is never
//     admitted by a hit of either charge, so a rejected cost always counts.
//   - A cost of 0 is admitted iff the counter is not past its limit: at
//     exactly the limit it passes, as in envoyproxy/ratelimit, where a check
//     of ChargeAdmitted asks for room for one more.
//   - Refunds are as above.
//   - When Requests is 0 nothing is ever admitted, so the state is kept and
//     every hit of cost 0 or more is rejected as above.
//   - A counter past its limit saturates instead of overflowing: a window
//     holds at most MaxCount, a token bucket's debt is at most MaxDebt, and
//     a sliding-window log keeps only its newest Requests+1 entries, which
//     decide every verdict (a later refund takes back from those).
//
// A hit changes the state only if its cost is not 0 and it is admitted or
// charged always; otherwise Apply returns s itself.
//
// A Limit with an unknown Kind, a Period of 0 or less, a negative
// Requests, or a sliding-window log longer than MaxLogRequests rejects
// every hit, refunds too, with a zero Verdict and leaves the state as it
// is, as the Redis script does. Other limits that fail Validate may leave
// the range Lua represents exactly, but never make Apply panic.
//
// Arithmetic: all times, counts and costs are integers below 2^53, so Lua's
// doubles hold them exactly. The only non-integer steps are ⌈a·b/c⌉ and
// ⌊a·b/c⌋ (mulDivCeil, mulDivFloor), computed in IEEE doubles as the
// product, rounded, then the quotient, rounded, then ceil or floor — exactly
// what Lua computes for math.ceil(a * b / c). When a·b < 2^53 the result is
// the exact integer; above that it is rounded, identically in Go and Lua.
func Apply(l Limit, s State, now, cost int64) (State, Verdict) {
	if l.Period <= 0 || l.Requests < 0 || l.Kind == SlidingWindowLog && l.Requests > MaxLogRequests {
		return s, Verdict{}
	}
	switch l.Kind {
	case TokenBucket:
		return applyTokenBucket(l, s, now, cost)
	case FixedWindow:
		return applyFixedWindow(l, s, now, cost)
	case SlidingWindowCounter:
		return applySlidingWindowCounter(l, s, now, cost)
	case SlidingWindowLog:
		return applySlidingWindowLog(l, s, now, cost)
	}
	return s, Verdict{}
}

// Expiry returns the µs timestamp from which s is equivalent to the zero
// State under l: for every now ≥ l.Expiry(s), Apply(l, s, now, c) and
// Apply(l, State{}, now, c) give the same verdict and equal states. A store
// may drop the key from then on. Expiry depends only on l.Kind and
// l.Period, which identify a counter, never on Requests or Burst.
//
// A token bucket expires at its theoretical arrival time, when it is full;
// a fixed window at the end of the window that holds hits; a sliding-window
// counter one window after that (when the previous-window weight is gone);
// a sliding-window log one Period after its newest entry. An empty counter
// returns a time at or before any plausible now.
func (l Limit) Expiry(s State) int64 {
	switch l.Kind {
	case TokenBucket:
		return s.T
	case FixedWindow:
		if s.Cur > 0 {
			return s.T + l.Period
		}
	case SlidingWindowCounter:
		if s.Cur > 0 {
			return s.T + 2*l.Period
		}
		if s.Prev > 0 {
			return s.T + l.Period
		}
	case SlidingWindowLog:
		if n := len(s.Log); n > 0 {
			return s.Log[n-1] + l.Period
		}
	}
	return 0
}

// Capacity returns the most units the counter can hold: Requests, plus
// Burst for a token bucket. Verdict.Limit reports it.
func (l Limit) Capacity() int64 {
	if l.Kind == TokenBucket {
		return l.Requests + max(l.Burst, 0)
	}
	return l.Requests
}

// micros converts a count of µs to a Duration.
func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// mulDivCeil returns ⌈a·b/c⌉ the way Lua's math.ceil(a * b / c) does: the
// product and the quotient are each rounded to a double. It is exact when
// a·b < 2^53. c must be positive.
func mulDivCeil(a, b, c int64) int64 {
	// The explicit conversion forbids fusing the product into anything.
	return int64(math.Ceil(float64(float64(a)*float64(b)) / float64(c)))
}

// mulDivFloor returns ⌊a·b/c⌋ the way Lua's math.floor(a * b / c) does; see
// mulDivCeil.
func mulDivFloor(a, b, c int64) int64 {
	return int64(math.Floor(float64(float64(a)*float64(b)) / float64(c)))
}

// windowStart returns the start of the period-long window that holds now,
// windows being aligned to the Unix epoch as in envoyproxy/ratelimit. Lua's
// now - now % period computes the same for now ≥ 0.
func windowStart(now, period int64) int64 {
	m := now % period
	if m < 0 {
		m += period
	}
	return now - m
}

// never is the verdict of a hit no wait can admit: a positive cost above
// the capacity, or any non-refund hit when Requests is 0.
func never(v Verdict, period int64) Verdict {
	v.Allowed = false
	v.RetryAfter = micros(period)
	return v
}
