package algorithm

// Leases: budgets of hits reserved from a counter in one step, spent
// elsewhere without asking the counter again, and given back when unspent.
//
// A lease is charged to the counter when it is granted, exactly as an
// admitted hit of its size would be, so whatever spends it can never make
// the counter admit more than the algorithm allows:
//
//   - Fixed window: a lease lasts at most until its window ends, so the hits
//     admitted in a window, by the counter and from its leases together,
//     never exceed Requests.
//   - Sliding-window counter: the same, and since the previous window's
//     weight only falls as a window goes on, a hit spent from a lease later
//     in the window finds the estimate no higher than at the grant.
//   - Token bucket: a lease's hits are taken from the bucket at the grant,
//     so the grants alone form a sequence the strict bucket admits. Spending
//     them later shifts admissions by at most the lease's lifetime: in any
//     interval of length d, the hits admitted are at most what the strict
//     bucket admits in an interval of length d + lifetime. A short lifetime
//     keeps the difference to its refill.
//   - Sliding-window log: not leased. Its exactness is the reason to choose
//     it, and a lease would have to fix each hit's time at the grant.
//
// Returning what is unspent only ever lowers a counter, so it cannot cause
// overage either; a lease never returned (its holder crashed) only causes
// false rejections, until its window ends or, for a bucket, its hits refill.

// Leasable reports whether counters of kind k can be leased.
func (k Kind) Leasable() bool {
	return k == TokenBucket || k == FixedWindow || k == SlidingWindowCounter
}

// Lease is a budget of Hits reserved from one counter.
type Lease struct {
	// Hits is the number of hits granted, already charged to the counter.
	// It is 0 when the counter has no room for one hit.
	Hits int64
	// Window is the start of the window the hits were charged to (fixed
	// window, sliding-window counter), or the instant of the grant (token
	// bucket), in µs; Return needs it. It is 0 when Hits is.
	Window int64
	// Until is the instant, in µs, from which the lease may no longer be
	// spent: at the latest its window's end, and at the latest the grant
	// plus the lifetime asked for.
	Until int64
	// Verdict is the counter's answer at the grant: for a lease of Hits,
	// the verdict of an admitted hit of that cost (Remaining is what the
	// counter holds for everyone else); for none, the verdict of a rejected
	// hit of cost 1, whose RetryAfter says when to ask again.
	Verdict Verdict
}

// Reserve grants a lease of at most want hits on a counter of l at now,
// lasting at most lifetime µs, and returns the counter's new state. The
// lease is as large as the counter's Remaining allows, up to want: it is
// charged as Apply charges an admitted hit of its size, so Reserve never
// grants what a strict hit could not take. A limit that is not Leasable,
// that Apply cannot evaluate, or a want below 1 grants nothing and keeps
// the state, with the verdict Apply gives a hit of cost 1.
//
// Reserve ignores l.Charge: a lease is a reservation, always admitted
// first.
func Reserve(l Limit, s State, now, want, lifetime int64) (State, Lease) {
	l.Charge = ChargeAdmitted
	_, check := Apply(l, s, now, 0)
	n := min(want, check.Remaining)
	if !l.Kind.Leasable() || n < 1 {
		_, v := Apply(l, s, now, 1)
		if v.Allowed {
			// Only a want below 1 or an unleasable kind gets here: report
			// the counter, not an admission that did not happen.
			v = check
		}
		return s, Lease{Verdict: v}
	}
	next, v := Apply(l, s, now, n)
	lease := Lease{Hits: n, Window: now, Until: now + max(lifetime, 0), Verdict: v}
	if l.Kind != TokenBucket {
		lease.Window = windowStart(now, l.Period)
		lease.Until = min(lease.Until, lease.Window+l.Period)
	}
	return next, lease
}

// Return gives back unspent hits of lease, granted on a counter of l, at
// now, and returns the counter's new state. Hits of a window that has
// ended count no more, so nothing is given back for them, except that a
// sliding-window counter's previous window still weighs: its count is
// lowered. A token bucket is refunded as Apply refunds, never above full.
func Return(l Limit, s State, now int64, lease Lease, unspent int64) State {
	unspent = min(unspent, lease.Hits)
	if unspent <= 0 || !l.Kind.Leasable() {
		return s
	}
	l.Charge = ChargeAdmitted
	if l.Kind == TokenBucket {
		next, _ := Apply(l, s, now, -unspent)
		return next
	}
	w := windowStart(now, l.Period)
	switch {
	case w == lease.Window:
		next, _ := Apply(l, s, now, -unspent)
		return next
	case l.Kind == SlidingWindowCounter && w == lease.Window+l.Period:
		var prev, cur int64
		switch s.T {
		case lease.Window:
			prev = s.Cur
		case w:
			prev, cur = s.Prev, s.Cur
		}
		return State{T: w, Cur: cur, Prev: max(0, prev-unspent)}
	}
	return s
}
