package top

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// summary is a finished heavy-hitter summary in Misra-Gries form, over a
// stream whose weights add up to total: every value v has a true count
// in [lo(v), c(v)+delta], where a value not among entries has c = lo = 0.
// Its invariant, with k the capacity it was built with,
//
//	Σc + k·delta ≤ total
//
// bounds delta by total/k, and so both how much any upper bound
// overstates and the true count of any value that is not tracked.
// Summaries are immutable once built: windows and answers share them.
type summary struct {
	entries []entry // sorted by key, keys unique
	delta   uint64
	total   uint64
}

// entry is one tracked value of a summary.
type entry struct {
	key string // the value's descriptor entries, encoded (encodeEntries)
	// c is the Misra-Gries counter: c+delta is an upper bound of the
	// value's count.
	c uint64
	// lo is a lower bound of the value's count.
	lo uint64
}

// hi returns the upper bound of e's count in s.
func (s *summary) hi(e *entry) uint64 { return satAdd(e.c, s.delta) }

// find returns the entry of key in s, or nil.
func (s *summary) find(key string) *entry {
	i, ok := slices.BinarySearchFunc(s.entries, key, func(e entry, k string) int { return strings.Compare(e.key, k) })
	if !ok {
		return nil
	}
	return &s.entries[i]
}

// bounds returns the lower and upper bound of key's count in s.
func (s *summary) bounds(key string) (lo, hi uint64) {
	if e := s.find(key); e != nil {
		return e.lo, s.hi(e)
	}
	return 0, s.delta
}

// merge returns the union of summaries, pruned to capacity k: counters,
// lower bounds, deltas and totals add up, so the error of the union is
// at most the sum of theirs, and the pruning keeps Σc + k·delta ≤ total
// (see prune). Nil summaries are skipped; the result is new.
func merge(k int, summaries ...*summary) *summary {
	out := &summary{}
	n := 0
	for _, s := range summaries {
		if s != nil {
			n += len(s.entries)
		}
	}
	all := make([]entry, 0, n)
	for _, s := range summaries {
		if s == nil {
			continue
		}
		all = append(all, s.entries...)
		out.delta = satAdd(out.delta, s.delta)
		out.total = satAdd(out.total, s.total)
	}
	slices.SortFunc(all, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	// Fold equal keys together.
	w := 0
	for i := range all {
		if w > 0 && all[w-1].key == all[i].key {
			all[w-1].c = satAdd(all[w-1].c, all[i].c)
			all[w-1].lo = satAdd(all[w-1].lo, all[i].lo)
			continue
		}
		all[w] = all[i]
		w++
	}
	out.entries = all[:w]
	out.prune(k)
	return out
}

// prune keeps at most k entries. With more, it subtracts t, the
// (k+1)-th largest counter, from every counter and adds it to delta,
// Misra-Gries' decrement: the k largest counters lose t each and the
// rest are dropped, so Σc + k·delta does not grow, and every value's
// upper bound c+delta stays what it was, or (for a dropped value, whose
// c ≤ t) at most the new delta. Lower bounds are kept as they are. Of the entries
// whose counter is then zero, those with the largest lower bounds stay,
// up to k entries in all.
func (s *summary) prune(k int) {
	if len(s.entries) <= k {
		return
	}
	order := make([]int, len(s.entries))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ea, eb := &s.entries[a], &s.entries[b]
		if c := cmp.Compare(eb.c, ea.c); c != 0 {
			return c
		}
		if c := cmp.Compare(eb.lo, ea.lo); c != 0 {
			return c
		}
		return strings.Compare(ea.key, eb.key)
	})
	if t := s.entries[order[k]].c; t > 0 {
		for i := range s.entries {
			s.entries[i].c -= min(s.entries[i].c, t)
		}
		s.delta = satAdd(s.delta, t)
	}
	keep := make([]bool, len(s.entries))
	for _, i := range order[:k] {
		keep[i] = true
	}
	// Beyond the first k by counter, an entry whose counter is now
	// zero may still carry a better lower bound than the kept ones
	// whose counter is zero too: prefer it.
	zero := order[:0:0]
	for _, i := range order {
		if s.entries[i].c == 0 {
			zero = append(zero, i)
		}
	}
	if len(zero) > 0 {
		slices.SortFunc(zero, func(a, b int) int {
			if c := cmp.Compare(s.entries[b].lo, s.entries[a].lo); c != 0 {
				return c
			}
			return strings.Compare(s.entries[a].key, s.entries[b].key)
		})
		for _, i := range zero {
			keep[i] = false
		}
		positive := 0
		for _, i := range order[:k] {
			if s.entries[i].c > 0 {
				positive++
			}
		}
		for _, i := range zero[:min(len(zero), k-positive)] {
			keep[i] = true
		}
	}
	w := 0
	for i := range s.entries {
		if keep[i] {
			s.entries[w] = s.entries[i]
			w++
		}
	}
	clear(s.entries[w:])
	s.entries = s.entries[:w]
}

// satAdd returns a+b, or the largest uint64 where that overflows: counts
// read from other instances are not trusted to be small.
func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}
