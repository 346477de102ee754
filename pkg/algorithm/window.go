package algorithm

// Fixed window.
//
// Windows are Period long and aligned to the Unix epoch, w = now − now mod
// Period, as envoyproxy/ratelimit aligns them; a unit multiplier is part of
// Period, so "5 per 5 minutes" windows start at multiples of 300 s since the
// epoch. The state is the window start (State.T) and its count (State.Cur);
// a state whose T is not the current window counts as empty.
//
// A hit of cost n ≥ 1 is admitted iff Cur + n ≤ Requests. Verdict fields:
//
//   - Limit is Requests.
//   - Remaining is Requests − Cur', at least 0.
//   - ResetAfter is the time until the window ends (w + Period − now) while
//     the window holds hits, and 0 once it holds none.
//   - RetryAfter of a rejected hit of cost n ≤ Requests, or of a failed
//     check, is the time until the window ends.
//   - A refund lowers Cur, never below 0.
//   - With ChargeAlways, a cost that does not fit is added, up to MaxCount,
//     and rejected with RetryAfter the time until the window ends; a check
//     passes while Cur ≤ Requests.
func applyFixedWindow(l Limit, s State, now, cost int64) (State, Verdict) {
	r, p := l.Requests, l.Period
	w := windowStart(now, p)
	end := w + p - now
	var cur int64
	if s.T == w {
		cur = s.Cur
	}
	resetAfter := func(cur int64) int64 {
		if cur > 0 {
			return end
		}
		return 0
	}
	v := Verdict{Limit: r, Remaining: max(0, r-cur), ResetAfter: micros(resetAfter(cur))}
	always := l.Charge == ChargeAlways
	switch {
	case cost < 0:
		cur = max(0, cur+cost)
	case r == 0 || cost > r && !always:
		return s, never(v, p)
	case cost == 0:
		v.Allowed = cur+1 <= r || always && cur <= r
		if !v.Allowed {
			v.RetryAfter = micros(end)
		}
		return s, v
	case cost > r-cur && always:
		cur = addCount(cur, cost)
		return State{T: w, Cur: cur}, Verdict{Limit: r, ResetAfter: micros(end), RetryAfter: micros(end)}
	case cost > r-cur:
		v.RetryAfter = micros(end)
		return s, v
	default:
		cur += cost
	}
	v.Allowed = true
	v.Remaining = max(0, r-cur)
	v.ResetAfter = micros(resetAfter(cur))
	return State{T: w, Cur: cur}, v
}

// addCount returns count + cost for a cost above 0, at most MaxCount.
func addCount(count, cost int64) int64 {
	if cost > MaxCount-count {
		return MaxCount
	}
	return count + cost
}

// Sliding-window counter.
//
// Windows are aligned as for the fixed window. The state is the current
// window's start (State.T), its count (State.Cur) and the previous window's
// count (State.Prev). At elapsed = now − w into the current window, the
// previous window still weighs (Period − elapsed)/Period, and the estimate
// is
//
//	E = ⌈Prev·(Period − elapsed)/Period⌉ + Cur
//
// A hit of cost n ≥ 1 is admitted iff E + n ≤ Requests; the ceiling makes
// this the exact real-valued comparison Prev·(Period−elapsed)/Period + Cur +
// n ≤ Requests. Verdict fields:
//
//   - Limit is Requests.
//   - Remaining is Requests − E', at least 0.
//   - ResetAfter is the time until no counted hit weighs any more: the end
//     of the next window while the current window holds hits, else the end
//     of the current window while the previous one does, else 0.
//   - RetryAfter of a rejected hit of cost n ≤ Requests (n = 1 for a check)
//     is the earliest time the estimate admits it: later in this window if
//     Cur + n ≤ Requests, when elapsed reaches Period − ⌊(Requests−Cur−n)·
//     Period/Prev⌋; otherwise in the next window, where the current count
//     becomes the previous one, at Period − ⌊(Requests−n)·Period/Cur⌋ into it.
//   - A refund lowers Cur, then Prev, never below 0.
//   - With ChargeAlways, a cost that does not fit is added to Cur, up to
//     MaxCount, and rejected with RetryAfter the time until E' ≤ Requests,
//     worked out as above for n = 0; a check passes while E ≤ Requests.
func applySlidingWindowCounter(l Limit, s State, now, cost int64) (State, Verdict) {
	r, p := l.Requests, l.Period
	w := windowStart(now, p)
	elapsed := now - w
	var prev, cur int64
	switch s.T {
	case w:
		prev, cur = s.Prev, s.Cur
	case w - p:
		prev = s.Cur
	}
	estimate := func(prev, cur int64) int64 {
		return mulDivCeil(prev, p-elapsed, p) + cur
	}
	resetAfter := func(prev, cur int64) int64 {
		switch {
		case cur > 0:
			return 2*p - elapsed
		case prev > 0:
			return p - elapsed
		}
		return 0
	}
	// retryAfter returns when the estimate leaves room for n more.
	retryAfter := func(prev, cur, n int64) int64 {
		if m := r - cur - n; m >= 0 {
			return p - mulDivFloor(m, p, prev) - elapsed
		}
		// Cur > Requests − n ≥ 0: wait for the next window.
		into := p - mulDivFloor(r-n, p, cur)
		return p - elapsed + into
	}
	e := estimate(prev, cur)
	v := Verdict{Limit: r, Remaining: max(0, r-e), ResetAfter: micros(resetAfter(prev, cur))}
	always := l.Charge == ChargeAlways
	n := max(cost, 1)
	if always {
		n = max(cost, 0)
	}
	switch {
	case cost < 0:
		if cost <= -(cur + prev) {
			cur, prev = 0, 0
		} else {
			taken := min(cur, -cost)
			cur -= taken
			prev -= -cost - taken
		}
	case r == 0 || cost > r && !always:
		return s, never(v, p)
	case n > r-e && always && cost > 0:
		cur = addCount(cur, cost)
		return State{T: w, Cur: cur, Prev: prev}, Verdict{Limit: r,
			ResetAfter: micros(resetAfter(prev, cur)), RetryAfter: micros(retryAfter(prev, cur, 0))}
	case n > r-e:
		v.RetryAfter = micros(retryAfter(prev, cur, n))
		return s, v
	case cost == 0:
		v.Allowed = true
		return s, v
	default:
		cur += cost
	}
	v.Allowed = true
	v.Remaining = max(0, r-estimate(prev, cur))
	v.ResetAfter = micros(resetAfter(prev, cur))
	return State{T: w, Cur: cur, Prev: prev}, v
}
