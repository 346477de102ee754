package memory

import (
	"sync"
	"unsafe"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// shard is one independently locked partition of the counters. Token
// buckets, by far the most common counters, live in a bucketTable at 16
// bytes a slot; the window algorithms, whose state is larger, in maps.
//
// A shard fills two cache lines of its own (Store.shards is allocated
// aligned, its length a power of two): a token-bucket Apply touches only
// the first, which holds the lock and the fields of that path, so a
// decision moves one line between cores, and no lock shares a line with a
// neighbouring shard's.
type shard struct {
	shardFields
	_ [2*cacheLine - unsafe.Sizeof(shardFields{})]byte
}

const cacheLine = 64

type shardFields struct {
	// The token-bucket path, the first cache line, ends with
	// buckets.floor; buckets.next, only written when a TAT is stored
	// lower, starts the second.
	mu      sync.Mutex
	applies uint32 // Applies that touched the shard
	buckets bucketTable

	windows   map[uint64]windowState  // fixed window, sliding-window counter
	logs      map[uint64]logState     // sliding-window log
	penalties map[uint64]penaltyState // by the key of their counter
	rng       uint64                  // xorshift state for eviction samples
}

// penaltyKind is the candidate kind of a penalty state in an eviction
// sample; no algorithm has it.
const penaltyKind algorithm.Kind = 0

// penaltyState is the penalty state of a counter (algorithm.Penalty).
type penaltyState struct {
	expiry int64
	state  algorithm.PenaltyState
}

// windowState is the state of a fixed window or sliding-window counter.
type windowState struct {
	expiry         int64
	start, cur, pv int64
}

// logState is the state of a sliding-window log.
type logState struct {
	expiry int64
	times  []int64
}

func (sh *shard) len() int {
	return sh.buckets.n + len(sh.windows) + len(sh.logs) + len(sh.penalties)
}

// loadPenalty returns the stored penalty state of a counter, zero when
// there is none.
func (sh *shard) loadPenalty(key uint64) algorithm.PenaltyState {
	return sh.penalties[key].state
}

// savePenalty stores the penalty state of a counter, or deletes it once
// it is equivalent to a clean record. Adding one to a full shard evicts
// first.
func (sh *shard) savePenalty(p *algorithm.Penalty, key uint64, ps algorithm.PenaltyState, now int64, limit int) {
	expiry := p.Expiry(ps)
	_, found := sh.penalties[key]
	if expiry <= now {
		if found {
			delete(sh.penalties, key)
		}
		return
	}
	if !found {
		for sh.len() >= limit && sh.len() > 0 {
			sh.evict(now)
		}
		if sh.penalties == nil {
			sh.penalties = make(map[uint64]penaltyState)
		}
	}
	sh.penalties[key] = penaltyState{expiry: expiry, state: ps}
}

// load returns the stored state of a counter and whether it is stored.
func (sh *shard) load(kind algorithm.Kind, key uint64) (algorithm.State, bool) {
	switch kind {
	case algorithm.TokenBucket:
		tat, ok := sh.buckets.get(key)
		return algorithm.State{T: tat}, ok
	case algorithm.FixedWindow, algorithm.SlidingWindowCounter:
		w, ok := sh.windows[key]
		return algorithm.State{T: w.start, Cur: w.cur, Prev: w.pv}, ok
	case algorithm.SlidingWindowLog:
		l, ok := sh.logs[key]
		return algorithm.State{Log: l.times}, ok
	}
	return algorithm.State{}, false
}

// applyBucket is load, algorithm.Apply and save for a token bucket, the
// hot path: it probes the table once and updates a live counter in place.
func (sh *shard) applyBucket(l algorithm.Limit, key uint64, now, cost int64, limit int) algorithm.Verdict {
	i, found := sh.buckets.lookup(key)
	var state algorithm.State
	if found {
		state.T = sh.buckets.slots[i].tat
	}
	next, v := algorithm.Apply(l, state, now, cost)
	switch {
	case cost == 0 || !v.Allowed && l.Charge != algorithm.ChargeAlways:
	case found && next.T > now: // l.Expiry(next) is next.T
		sh.buckets.set(i, next.T)
	default:
		sh.save(l, key, next, found, now, limit)
	}
	return v
}

// save stores a counter's new state, or deletes the counter if the state
// is already equivalent to a fresh one. Adding a counter to a full shard
// evicts first.
func (sh *shard) save(l algorithm.Limit, key uint64, s algorithm.State, found bool, now int64, limit int) {
	expiry := l.Expiry(s)
	if expiry <= now {
		if found {
			sh.delete(l.Kind, key)
		}
		return
	}
	if !found {
		for sh.len() >= limit && sh.len() > 0 {
			sh.evict(now)
		}
	}
	switch l.Kind {
	case algorithm.TokenBucket:
		sh.buckets.put(key, s.T)
	case algorithm.FixedWindow, algorithm.SlidingWindowCounter:
		if sh.windows == nil {
			sh.windows = make(map[uint64]windowState)
		}
		sh.windows[key] = windowState{expiry: expiry, start: s.T, cur: s.Cur, pv: s.Prev}
	case algorithm.SlidingWindowLog:
		if sh.logs == nil {
			sh.logs = make(map[uint64]logState)
		}
		sh.logs[key] = logState{expiry: expiry, times: s.Log}
	}
}

func (sh *shard) delete(kind algorithm.Kind, key uint64) {
	switch kind {
	case algorithm.TokenBucket:
		sh.buckets.remove(key)
	case algorithm.FixedWindow, algorithm.SlidingWindowCounter:
		delete(sh.windows, key)
	case algorithm.SlidingWindowLog:
		delete(sh.logs, key)
	case penaltyKind:
		delete(sh.penalties, key)
	}
}

// sweep counts an Apply and, every sweepEvery Applies, examines a few
// counters of the store kind uses, and every sweepOthersEvery Applies of
// all of them, deleting the expired ones. The bucket table is swept in slot
// order; the maps from wherever Go starts an iteration, which is random.
func (sh *shard) sweep(kind algorithm.Kind, now int64) {
	// Small enough to inline: most Applies only count.
	if sh.applies++; sh.applies%sweepEvery == 0 {
		sh.sweepSome(kind, now)
	}
}

func (sh *shard) sweepSome(kind algorithm.Kind, now int64) {
	all := sh.applies%sweepOthersEvery == 0
	if all || kind == algorithm.TokenBucket {
		sh.buckets.sweep(now, sweepSlots)
	}
	if all || kind == algorithm.FixedWindow || kind == algorithm.SlidingWindowCounter {
		sweepMap(sh.windows, now, sweepSample, func(w windowState) int64 { return w.expiry })
	}
	if all || kind == algorithm.SlidingWindowLog {
		sweepMap(sh.logs, now, sweepSample, func(l logState) int64 { return l.expiry })
	}
	if all {
		sweepMap(sh.penalties, now, sweepSample, func(p penaltyState) int64 { return p.expiry })
	}
}

// sweepMap examines up to n entries of m from a random position and
// deletes those expired at now.
func sweepMap[V any](m map[uint64]V, now int64, n int, expiry func(V) int64) {
	for k, v := range m {
		if expiry(v) <= now {
			delete(m, k)
		}
		if n--; n == 0 {
			return
		}
	}
}

// evict frees at least one slot of a non-empty shard: it samples up to
// evictSample counters, deletes the expired ones, and if none was expired
// deletes the one that would expire soonest.
func (sh *shard) evict(now int64) {
	sh.rng ^= sh.rng << 13
	sh.rng ^= sh.rng >> 7
	sh.rng ^= sh.rng << 17
	var c candidate
	// Start with a different store each time so none is favoured.
	for i := range uint64(4) {
		switch (sh.rng + i) % 4 {
		case 0:
			sh.buckets.sample(int(sh.rng>>8), now, &c)
		case 1:
			sampleMap(sh.windows, now, &c, algorithm.FixedWindow, func(w windowState) int64 { return w.expiry })
		case 2:
			sampleMap(sh.logs, now, &c, algorithm.SlidingWindowLog, func(l logState) int64 { return l.expiry })
		case 3:
			sampleMap(sh.penalties, now, &c, penaltyKind, func(p penaltyState) int64 { return p.expiry })
		}
	}
	if c.expired == 0 && c.live {
		sh.delete(c.kind, c.key)
	}
}

// candidate collects an eviction sample.
type candidate struct {
	sampled, expired int
	// live reports whether kind, key and expiry hold the sampled counter
	// that expires soonest.
	live   bool
	kind   algorithm.Kind
	key    uint64
	expiry int64
}

// consider adds a counter that has not expired.
func (c *candidate) consider(kind algorithm.Kind, key uint64, expiry int64) {
	if !c.live || expiry < c.expiry {
		c.live, c.kind, c.key, c.expiry = true, kind, key, expiry
	}
}

// sampleMap adds entries of m to c until c holds evictSample, deleting the
// expired ones.
func sampleMap[V any](m map[uint64]V, now int64, c *candidate, kind algorithm.Kind, expiry func(V) int64) {
	for k, v := range m {
		if c.sampled == evictSample {
			return
		}
		c.sampled++
		if e := expiry(v); e <= now {
			delete(m, k)
			c.expired++
		} else {
			c.consider(kind, k, e)
		}
	}
}
