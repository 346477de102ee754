package algorithm

import (
	"errors"
	"fmt"
)

// Penalties: an escalating cooldown for clients that ignore Retry-After.
//
// A Penalty watches the rejections of one counter. Each rejected hit tells
// its client when to come back (Verdict.RetryAfter); the penalty state
// remembers the instant the latest one pointed to, Until (a later answer
// replaces an earlier one: a client goes by the last Retry-After it was
// given, even when it is shorter). A hit rejected before Until
// arrived while its client was told to wait: it is a strike. A hit
// rejected at or after Until is an honest retry that found no room, and
// starts the count again from zero. When the strikes since the count
// last started exceed Tolerance, the client is blocked for a cooldown:
// Cooldown the first time, then the previous cooldown times Factor, at
// most Max. While blocked, every hit the penalty covers is rejected
// without touching the counter, Retry-After is the cooldown left, and
// the hit is a strike like any other, so a client that keeps sending
// through its cooldown earns the next, longer one from that instant.
// Once ForgiveAfter has passed after the end of the latest wait (Until,
// which covers the cooldowns) the state is forgotten and the next
// cooldown is Cooldown again.
//
// The penalty covers hits of cost 0 or more charged on admission
// (ChargeAdmitted) on a limit Apply can evaluate: a refund (a negative
// cost) is always applied, and an always-charged hit is usage being
// reported, not a request to admit, so it is neither blocked nor counted.
// A hit that no wait can admit (its cost exceeds the capacity, or
// Requests is 0) is blocked during a cooldown but never a strike: its
// client was not told to wait for it. Admitted hits leave the penalty
// state as it is.
//
// State is kept per counter (its identity: domain, entries, kind,
// period), beside the counter. Like Apply, ApplyPenalty is written once
// more in Lua (the Redis store's script) and both must give identical
// results on the vectors of package algorithmtest.

// Bounds that Penalty.Validate enforces, so every product and instant stays
// below 2^53 µs.
const (
	// MaxCooldown is the longest Cooldown, Max and ForgiveAfter: 30 days.
	MaxCooldown = 30 * 24 * 3600 * 1_000_000
	// MaxFactor is the largest Factor.
	MaxFactor = 1000
	// MaxTolerance is the largest Tolerance.
	MaxTolerance = 1_000_000_000
)

// Penalty is an escalating cooldown for the clients of a counter that keep
// sending while they are told to wait. Durations are in µs.
type Penalty struct {
	// Tolerance is how many strikes (hits rejected while a Retry-After
	// was still running) are forgiven before a cooldown starts: a
	// cooldown starts at strike Tolerance+1.
	Tolerance int64
	// Cooldown is the length of the first cooldown.
	Cooldown int64
	// Factor multiplies each cooldown after the first; 1 keeps it
	// constant.
	Factor int64
	// Max caps every cooldown.
	Max int64
	// ForgiveAfter is the quiet time after the end of the latest wait
	// from which the client starts afresh.
	ForgiveAfter int64
}

// PenaltyState is the penalty state of one counter; the zero PenaltyState
// is a client with a clean record.
type PenaltyState struct {
	// Until is the end of the wait the client was last told, in µs: the
	// instant the latest rejected hit's Retry-After pointed to, and at
	// least Blocked.
	Until int64
	// Strikes counts the rejected hits that arrived before Until since the
	// count last started.
	Strikes int64
	// Last is the length of the latest cooldown in µs, 0 when none has
	// been imposed since the client was last forgiven.
	Last int64
	// Blocked is the end of the latest cooldown in µs.
	Blocked int64
}

// Validate reports whether p is within the bounds ApplyPenalty relies on:
// 0 ≤ Tolerance ≤ MaxTolerance, 1 ≤ Factor ≤ MaxFactor, and
// 1µs ≤ Cooldown ≤ Max ≤ MaxCooldown and 1µs ≤ ForgiveAfter ≤ MaxCooldown.
func (p Penalty) Validate() error {
	var errs []error
	if p.Tolerance < 0 || p.Tolerance > MaxTolerance {
		errs = append(errs, fmt.Errorf("tolerance %d outside [0, %d]", p.Tolerance, MaxTolerance))
	}
	if p.Factor < 1 || p.Factor > MaxFactor {
		errs = append(errs, fmt.Errorf("factor %d outside [1, %d]", p.Factor, MaxFactor))
	}
	if p.Cooldown < 1 || p.Cooldown > MaxCooldown {
		errs = append(errs, fmt.Errorf("cooldown %dµs outside [1µs, %dµs]", p.Cooldown, int64(MaxCooldown)))
	}
	if p.Max < p.Cooldown || p.Max > MaxCooldown {
		errs = append(errs, fmt.Errorf("max %dµs outside [cooldown %dµs, %dµs]", p.Max, p.Cooldown, int64(MaxCooldown)))
	}
	if p.ForgiveAfter < 1 || p.ForgiveAfter > MaxCooldown {
		errs = append(errs, fmt.Errorf("forgive_after %dµs outside [1µs, %dµs]", p.ForgiveAfter, int64(MaxCooldown)))
	}
	return errors.Join(errs...)
}

// Covers reports whether p applies to a hit of cost on l: a cost of 0 or
// more, charged on admission, on a limit Apply can evaluate.
func (p *Penalty) Covers(l Limit, cost int64) bool {
	return p != nil && cost >= 0 && l.Charge == ChargeAdmitted && evaluable(l)
}

// Expiry returns the µs timestamp from which ps is equivalent to the zero
// PenaltyState: Until, when no cooldown has been imposed (a later
// rejection starts the count again anyway), else Until plus ForgiveAfter.
// A store may drop the state from then on. A zero state returns 0.
func (p Penalty) Expiry(ps PenaltyState) int64 {
	if ps.Last == 0 {
		return ps.Until
	}
	return ps.Until + p.ForgiveAfter
}

// ApplyPenalty decides a hit of cost on a counter of l in state s at now,
// under penalty p whose state for the counter is ps, and returns the
// counter's new state, the penalty's new state and the verdict; see the
// rules above. A hit p does not cover is Apply's alone, and ps is returned
// as it is.
//
// A hit rejected by a cooldown, or whose rejection starts one, gets a
// verdict with Penalized set: not Allowed, Remaining 0, RetryAfter the
// cooldown left, ResetAfter the larger of the counter's and the cooldown
// left, and the counter's Limit. A blocked hit never changes the
// counter; since a covered hit is charged on admission, neither does any
// rejected one, so a store keeps the counter's state only when the hit is
// admitted, as it does without a penalty.
func ApplyPenalty(l Limit, s State, p *Penalty, ps PenaltyState, now, cost int64) (State, PenaltyState, Verdict) {
	if !p.Covers(l, cost) {
		next, v := Apply(l, s, now, cost)
		return next, ps, v
	}
	if now >= p.Expiry(ps) {
		ps = PenaltyState{}
	}
	var v Verdict
	next := s
	if ps.Blocked > now {
		_, v = Apply(l, s, now, 0)
		v = penalized(v, ps.Blocked-now)
	} else if next, v = Apply(l, s, now, cost); v.Allowed {
		return next, ps, v
	}
	strike := l.Requests > 0 && cost <= l.Capacity()
	if strike {
		if now < ps.Until {
			ps.Strikes++
		} else {
			ps.Strikes = 0
		}
		if ps.Strikes > p.Tolerance {
			d := p.Cooldown
			if ps.Last > 0 {
				d = min(p.Max, ps.Last*p.Factor)
			}
			ps.Last, ps.Blocked, ps.Strikes = d, max(ps.Blocked, now+d), 0
		}
	}
	if ps.Blocked > now {
		v = penalized(v, ps.Blocked-now)
	}
	if strike {
		ps.Until = now + v.RetryAfter.Microseconds()
	}
	return next, ps, v
}

// penalized returns the verdict of a hit blocked for left µs more, from
// the counter's verdict v.
func penalized(v Verdict, left int64) Verdict {
	return Verdict{
		Penalized:  true,
		Limit:      v.Limit,
		ResetAfter: max(v.ResetAfter, micros(left)),
		RetryAfter: micros(left),
	}
}

// evaluable reports whether Apply can evaluate l; see Apply.
func evaluable(l Limit) bool {
	return l.Period > 0 && l.Requests >= 0 && l.Kind >= TokenBucket && l.Kind <= SlidingWindowLog &&
		(l.Kind != SlidingWindowLog || l.Requests <= MaxLogRequests)
}
