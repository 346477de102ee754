package top

import (
	"cmp"
	"slices"
	"time"
)

// Snapshot is what one instance's summaries say at a time: per rule
// identity and window, the summaries of requests and rejections and how
// long a span they cover. Instances publish theirs for the others
// (package top/redis); Top and Rules merge them. A Snapshot is not
// changed once made.
type Snapshot struct {
	// Instance names the instance that made it.
	Instance string
	// Time is when it was made.
	Time time.Time
	// Capacity is the K of its summaries.
	Capacity int
	// Rules are sorted by ID.
	Rules []RuleSnapshot
}

// RuleSnapshot is the part of a Snapshot about one rule identity.
type RuleSnapshot struct {
	ID RuleID
	// RequestsPerUnit and Period are the limit's, zero for an override.
	RequestsPerUnit uint32
	Period          time.Duration
	windows         [numWindows]windowSnapshot
}

// windowSnapshot is one window of a rule identity: its merged summaries
// and the time they cover, from the window's start or the recorder's,
// whichever is later, to the snapshot's time.
type windowSnapshot struct {
	span time.Duration
	pair
}

// Snapshot returns the summaries at the recorder's clock's now. It
// forgets the rule identities with nothing left in any window.
func (r *Recorder) Snapshot() *Snapshot {
	return r.snapshot(func(RuleID) bool { return true })
}

// snapshot returns the snapshot of the rule identities match accepts.
func (r *Recorder) snapshot(match func(RuleID) bool) *Snapshot {
	now := r.now()
	slot := slotOf(now)
	snap := &Snapshot{Instance: r.instance, Time: now, Capacity: r.k}
	type taken struct {
		h          *Rule
		rpu        uint32
		period     time.Duration
		components [numWindows][]pair
	}
	var all []taken
	r.mu.Lock()
	for id, h := range r.rules {
		h.mu.Lock()
		h.ring.advance(slot)
		if h.ring.empty() {
			// Idle for an hour: forget it. A later decision puts it
			// back (reattach).
			delete(r.rules, id)
			h.detached = true
			h.ring.release()
			h.mu.Unlock()
			continue
		}
		if match(id) {
			all = append(all, taken{h: h, rpu: h.rpu, period: h.period, components: h.ring.windows(slot)})
		}
		h.mu.Unlock()
	}
	r.mu.Unlock()
	// Merged outside the locks: finished summaries never change.
	snap.Rules = make([]RuleSnapshot, len(all))
	for i, t := range all {
		rs := RuleSnapshot{ID: t.h.id, RequestsPerUnit: t.rpu, Period: t.period}
		for w := range Window(numWindows) {
			start := windowStart(w, slot)
			if start.Before(r.start) {
				start = r.start
			}
			rs.windows[w] = windowSnapshot{span: max(now.Sub(start), 0), pair: mergePairs(r.k, t.components[w]...)}
		}
		snap.Rules[i] = rs
	}
	slices.SortFunc(snap.Rules, func(a, b RuleSnapshot) int { return compareIDs(a.ID, b.ID) })
	return snap
}

func compareIDs(a, b RuleID) int {
	if c := cmp.Compare(a.Domain, b.Domain); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Rule, b.Rule); c != 0 {
		return c
	}
	return cmp.Compare(a.Limit, b.Limit)
}

// Prune returns s with every summary pruned to k counters, or s itself
// if its capacity is k or less: a smaller snapshot, whose counts may
// overstate by up to N/k. The publisher prunes one that would exceed
// its size bound.
func (s *Snapshot) Prune(k int) *Snapshot {
	if k <= 0 || k >= s.Capacity {
		return s
	}
	out := *s
	out.Capacity = k
	out.Rules = make([]RuleSnapshot, len(s.Rules))
	for i, rs := range s.Rules {
		for w := range rs.windows {
			rs.windows[w].pair = mergePairs(k, rs.windows[w].pair)
		}
		out.Rules[i] = rs
	}
	return &out
}
