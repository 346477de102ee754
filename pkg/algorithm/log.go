package algorithm

import "slices"

// Sliding-window log.
//
// The state is State.Log, the admission time of every admitted unit of cost,
// ascending. An entry at t counts while now < t + Period, so the log is
// exact: a hit of cost n ≥ 1 is admitted iff the live entries plus n are at
// most Requests, and it appends n entries at now. Memory is 8 bytes per
// unit in Go and one sorted-set member per unit in Redis, which is why
// Validate caps Requests at MaxLogRequests, and Apply rejects every hit of a
// longer log. Verdict fields:
//
//   - Limit is Requests.
//   - Remaining is Requests minus the live entries, at least 0.
//   - ResetAfter is the time until the newest entry leaves the window, 0
//     for an empty log.
//   - RetryAfter of a rejected hit of cost n ≤ Requests (n = 1 for a check)
//     is the time until enough of the oldest entries have left: the
//     (live+n−Requests)-th oldest entry's t + Period − now.
//   - A refund removes the newest entries, never more than there are.
//
// With ChargeAlways, a cost that does not fit appends its entries all the
// same, then the log keeps its newest Requests+1 entries: while they are
// live every hit is rejected, and once the oldest of them leaves, the
// older ones would have too. The hit is rejected with RetryAfter the time
// until the log holds Requests entries again. A check passes while the log
// holds at most Requests.
//
// An entry is inserted in time order even if now is earlier than the newest
// entry (a clock that stepped back), as a Redis sorted set would order it.
func applySlidingWindowLog(l Limit, s State, now, cost int64) (State, Verdict) {
	r, p := l.Requests, l.Period
	first, _ := slices.BinarySearch(s.Log, now-p+1)
	live := s.Log[first:]
	count := int64(len(live))
	v := Verdict{Limit: r, Remaining: max(0, r-count), ResetAfter: micros(logResetAfter(live, p, now))}
	always := l.Charge == ChargeAlways
	n := max(cost, 1)
	if always {
		n = max(cost, 0)
	}
	switch {
	case cost < 0:
		m := count
		if cost > -m {
			m = -cost
		}
		live = live[: count-m : count-m] // a later append must not write into s.Log
	case r == 0 || cost > r && !always:
		return s, never(v, p)
	case n > r-count && always && cost > 0:
		live = insertTimes(live, now, min(cost, r+1))
		live = live[int64(len(live))-(r+1):]
		return State{Log: live}, Verdict{Limit: r,
			ResetAfter: micros(logResetAfter(live, p, now)), RetryAfter: micros(live[0] + p - now)}
	case n > r-count:
		v.RetryAfter = micros(live[count+n-r-1] + p - now)
		return s, v
	case cost == 0:
		v.Allowed = true
		return s, v
	default:
		live = insertTimes(live, now, cost)
	}
	v.Allowed = true
	v.Remaining = max(0, r-int64(len(live)))
	v.ResetAfter = micros(logResetAfter(live, p, now))
	if len(live) == 0 {
		return State{}, v
	}
	return State{Log: live}, v
}

// logResetAfter returns the time until the newest entry of log leaves the
// window, or 0 for an empty log.
func logResetAfter(log []int64, period, now int64) int64 {
	if len(log) == 0 {
		return 0
	}
	return log[len(log)-1] + period - now
}

// insertTimes returns log with n entries at now inserted in order. It writes
// only beyond len(log), or into a new array.
func insertTimes(log []int64, now, n int64) []int64 {
	at, _ := slices.BinarySearch(log, now+1)
	if at == len(log) {
		log = slices.Grow(log, int(n))
		for range n {
			log = append(log, now)
		}
		return log
	}
	out := make([]int64, 0, int64(len(log))+n)
	out = append(out, log[:at]...)
	for range n {
		out = append(out, now)
	}
	return append(out, log[at:]...)
}
