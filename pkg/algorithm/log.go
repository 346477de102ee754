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
// An entry is inserted in time order even if now is earlier than the newest
// entry (a clock that stepped back), as a Redis sorted set would order it.
func applySlidingWindowLog(l Limit, s State, now, cost int64) (State, Verdict) {
	r, p := l.Requests, l.Period
	first, _ := slices.BinarySearch(s.Log, now-p+1)
	live := s.Log[first:]
	count := int64(len(live))
	v := Verdict{Limit: r, Remaining: max(0, r-count), ResetAfter: micros(logResetAfter(live, p, now))}
	n := max(cost, 1)
	switch {
	case cost < 0:
		m := count
		if cost > -m {
			m = -cost
		}
		live = live[: count-m : count-m] // a later append must not write into s.Log
	case r == 0 || cost > r:
		return s, never(v, p)
	case count+n > r:
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
