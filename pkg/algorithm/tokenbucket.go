package algorithm

import "math"

// Token bucket, in GCRA form.
//
// A bucket holds C = Requests+Burst tokens and refills continuously at
// Requests per Period. Its state is one integer, State.T, the theoretical
// arrival time (TAT): the bucket is full at TAT and from then on, so TAT is
// also the key's expiry.
//
// The algorithm works on credit, measured in µs of refill:
//
//	τ       = need(C)                    credit of a full bucket
//	K       = τ − max(0, TAT − now)      credit now
//	need(j) = ⌈j·Period/Requests⌉        credit that holds j whole tokens
//	a       = min(C, ⌊K·Requests/Period⌋) whole tokens available now
//
// A hit of cost n ≥ 1 is admitted iff n ≤ a. It spends the credit of the top
// n tokens, need(a) − need(a−n), keeping partial progress toward the next
// token but never a whole extra token:
//
//	K' = min(K − need(a) + need(a−n), need(a−n+1) − 1),  TAT' = now + τ − K'
//
// Because TAT is a whole µs, each admitted hit costs at least 1 µs. Compared
// with an exact real-valued bucket this means: a full bucket admits exactly
// C unit-cost hits; a client that keeps the bucket empty gets one hit per
// ⌈Period/Requests⌉ µs, never faster than the configured rate; partial
// progress is lost by at most 1 µs per hit. Above one token per µs
// (Requests > Period) unit-cost hits are limited to one per µs of credit
// while large costs are charged exactly.
//
// Verdict fields:
//
//   - Limit is C.
//   - Remaining is min(a', K'): the number of unit-cost hits admissible now,
//     one after another. It equals a', the whole tokens, unless Requests >
//     Period.
//   - ResetAfter is τ − K' = TAT' − now, the time until the bucket is full.
//   - RetryAfter of a rejected hit of cost n ≤ C is need(n) − K, the time
//     until a ≥ n. A check (cost 0) waits for need(1).
//   - A refund of m ≤ C tokens adds need(a+m) − need(a) credit, capped at τ;
//     a refund of more than C fills the bucket.
//   - Requests == 0 rejects every hit of cost ≥ 0 regardless of Burst, with
//     Remaining 0, ResetAfter 0 and RetryAfter one Period; a refund is
//     admitted and changes nothing.
//
// With ChargeAlways a bucket can go into debt, K < 0:
//
//   - A cost n ≥ 1 that does not fit (n > a) is charged as
//     K' = min(K − min(need(n), K + D), −1), where D = min(DebtPeriods ·
//     Period, MaxDebt), so the debt stops at D and is at least 1 µs (need
//     rounds, and above one token per µs need(C+1) may equal τ), and
//     rejected with RetryAfter −K', the time until the debt is repaid.
//   - A check (cost 0) is admitted iff K ≥ 0, else waits −K.
//   - A refund of m in debt adds min(need(m), τ − K) credit, so it repays
//     debt first, then refills at most to full.
//   - ResetAfter stays τ − K', which counts the debt.
func applyTokenBucket(l Limit, s State, now, cost int64) (State, Verdict) {
	b := bucket{requests: l.Requests, period: l.Period, capacity: l.Capacity()}
	v := Verdict{Limit: b.capacity}
	if b.requests == 0 {
		v.Allowed = cost < 0
		if !v.Allowed {
			v = never(v, b.period)
		}
		return s, v
	}
	tau := b.need(b.capacity)
	k := tau - max(0, s.T-now)
	a := b.tokens(k)

	always := l.Charge == ChargeAlways
	var k2 int64
	switch {
	case cost < 0 && k < 0:
		k2 = k + b.needUpTo(-float64(cost), tau-k)
	case cost < 0:
		m := b.capacity
		if cost > -m {
			m = -cost
		}
		k2 = min(tau, k+b.need(a+m)-b.need(a))
	case cost == 0:
		v.Remaining = b.remaining(k)
		v.ResetAfter = micros(tau - k)
		switch {
		case always:
			v.Allowed = k >= 0
			v.RetryAfter = micros(max(0, -k))
		default:
			v.Allowed = a >= 1
			if !v.Allowed {
				v.RetryAfter = micros(b.need(1) - k)
			}
		}
		return s, v
	case always && cost > a:
		k2 = min(k-b.needUpTo(float64(cost), max(0, k+min(DebtPeriods*b.period, MaxDebt))), -1)
		v.Remaining = b.remaining(k2)
		v.ResetAfter = micros(tau - k2)
		v.RetryAfter = micros(max(0, -k2))
		return State{T: now + tau - k2}, v
	case cost > b.capacity:
		v.Remaining = b.remaining(k)
		v.ResetAfter = micros(tau - k)
		return s, never(v, b.period)
	case cost > a:
		v.Remaining = b.remaining(k)
		v.ResetAfter = micros(tau - k)
		v.RetryAfter = micros(b.need(cost) - k)
		return s, v
	default:
		k2 = min(k-b.need(a)+b.need(a-cost), b.need(a-cost+1)-1)
	}
	v.Allowed = true
	v.Remaining = b.remaining(k2)
	v.ResetAfter = micros(tau - k2)
	return State{T: now + tau - k2}, v
}

// bucket holds a token bucket's parameters for one decision.
type bucket struct {
	requests, period, capacity int64
}

// need returns the credit in µs that holds j whole tokens, ⌈j·Period/Requests⌉.
func (b bucket) need(j int64) int64 {
	return mulDivCeil(j, b.period, b.requests)
}

// needUpTo returns min(⌈j·Period/Requests⌉, most) for a count of tokens j
// that may be far above any capacity, comparing before converting so that
// nothing overflows. most must be below 2^53.
func (b bucket) needUpTo(j float64, most int64) int64 {
	if f := math.Ceil(float64(j*float64(b.period)) / float64(b.requests)); f < float64(most) {
		return int64(f)
	}
	return most
}

// tokens returns the whole tokens that k µs of credit hold, at most the
// capacity.
func (b bucket) tokens(k int64) int64 {
	if k <= 0 {
		return 0
	}
	return min(b.capacity, mulDivFloor(k, b.requests, b.period))
}

// remaining returns how many unit-cost hits k µs of credit admit one after
// another: the whole tokens, but at most one per µs.
func (b bucket) remaining(k int64) int64 {
	return max(0, min(b.tokens(k), k))
}
