// Package memory is tollgate's embedded store: counters in process memory,
// sharded for concurrency and bounded in size. It is the default store, and
// the fallback of rules whose failure mode is "local".
//
// A counter is found by a 64-bit hash of its identity (Domain, Entries,
// Limit.Kind and Limit.Period), so the hot path builds no key strings and a
// token-bucket counter costs one 16-byte slot of an open-addressing table:
// the hash and the bucket's theoretical arrival time.
//
// Two different identities share a counter only if their hashes collide.
// The hash is hash/maphash over a length-prefixed encoding (so no two
// identities encode alike) with a seed drawn at random per Store. With n
// live counters the chance that any two collide is about n²/2^65: 3·10^-8
// for a million. Because the seed is secret and differs per process, a
// client cannot search offline for descriptor values that collide with
// another client's counter, the same defence the Go runtime's maps use
// against hash flooding.
//
// Counters that are back to full capacity (past algorithm.Limit.Expiry) are
// dropped without a background goroutine: a counter that becomes full is
// deleted at once, and Applies examine a couple of counters of each shard
// they touch, on average, deleting expired ones; token buckets are swept in
// slot order, so every one is examined within a bounded number of Applies
// on its shard, and not at all while a lower bound of their expiries shows
// that none can have expired. When a shard holds its share of MaxKeys,
// adding a counter first evicts expired counters among a sample, else the
// sampled counter that would expire soonest, so a flood of unique
// descriptors cannot exhaust memory. Evicting a live counter forgets its hits, which admits
// more than the limit for that counter.
//
// A hit with a Penalty keeps the penalty state of its counter in a map of
// its shard under the counter's key, kept whatever the batch's outcome and
// dropped at algorithm.Penalty.Expiry (swept and evicted like counters,
// and counted against MaxKeys). Such hits take the batch path even alone,
// so hits without a penalty keep the single-hit fast path as it was.
package memory

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// Options configures a Store. The zero value works.
type Options struct {
	// Shards is the number of independently locked partitions, rounded up
	// to a power of two, and lowered so no shard holds less than one key
	// of MaxKeys. 0 means 256.
	Shards int
	// MaxKeys bounds the number of counters held; 0 means 1 000 000. Each
	// shard holds at most MaxKeys/Shards, so eviction starts a little
	// before MaxKeys as counters never spread perfectly evenly (within
	// about 1% at the defaults).
	MaxKeys int
	// Now is the clock, read once per batch; nil means the system's wall
	// clock. That default is read without time.Now where a cheaper call
	// exists, so a test that fakes time (testing/synctest) must set Now.
	Now func() time.Time
}

const (
	defaultShards  = 256
	maxShards      = 1 << 16
	defaultMaxKeys = 1_000_000

	// Every sweepEvery-th Apply on a shard examines sweepSlots slots of the
	// bucket table or sweepSample entries of a map, for the algorithm of
	// its first hit: one to two counters per Apply, in bursts because
	// starting a map iteration costs more than a few steps of it. Every
	// sweepOthersEvery-th Apply examines all three.
	sweepEvery       = 8
	sweepOthersEvery = 64
	sweepSlots       = 16
	sweepSample      = 16
	// evictSample is how many counters an eviction compares.
	evictSample = 8
	// inlineHits is the batch size handled without allocating.
	inlineHits = 8
	// shortKey is the longest identity encoding hashed from the small
	// buffer of the common case, and keyBuffer the longest hashed without
	// allocating. Zeroing the larger buffer costs a tenth of a decision.
	shortKey  = 128
	keyBuffer = 512
)

// Store is an in-process store.Store. It is safe for concurrent use.
type Store struct {
	seed     maphash.Seed
	now      func() int64 // µs since the Unix epoch
	shift    uint         // a key's shard is key >> shift
	perShard int
	shards   []shard
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Clearer = (*Store)(nil)
)

// New returns an empty Store.
func New(opts Options) *Store {
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = defaultMaxKeys
	}
	n := opts.Shards
	if n <= 0 {
		n = defaultShards
	}
	n = min(n, maxShards)
	n = 1 << bits.Len(uint(n-1)) // round up to a power of two
	for n > 1 && n > maxKeys {
		n /= 2
	}
	now := wallMicros
	if opts.Now != nil {
		now = func() int64 { return algorithm.Micros(opts.Now()) }
	}
	s := &Store{
		seed:     maphash.MakeSeed(),
		now:      now,
		shift:    uint(64 - bits.TrailingZeros(uint(n))),
		perShard: maxKeys / n,
		shards:   make([]shard, n),
	}
	for i := range s.shards {
		s.shards[i].rng = rand.Uint64() | 1
	}
	return s
}

// Len returns the number of counters held, expired ones not yet swept
// included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.len()
		sh.mu.Unlock()
	}
	return n
}

// Apply implements store.Store. It never blocks on anything but its own
// locks, so ctx is not consulted. A batch is decided under the locks of all
// the shards it touches, taken in ascending order, and is charged all or
// nothing as store.Store requires; within a batch each hit sees the counter
// as the earlier hits left it. When a hit that is not Soft is rejected,
// the admitted hits of its batch report the Remaining and ResetAfter of
// their unchanged counters, as package storetest specifies.
func (s *Store) Apply(_ context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	if len(verdicts) != len(hits) {
		return fmt.Errorf("memory store: %d verdicts for %d hits", len(verdicts), len(hits))
	}
	switch len(hits) {
	case 0:
		return nil
	case 1:
		if hits[0].Penalty != nil {
			s.applyBatch(hits, verdicts)
			break
		}
		s.applyOne(&hits[0], &verdicts[0])
	default:
		s.applyBatch(hits, verdicts)
	}
	return nil
}

// applyOne is Apply for a batch of one hit, the common case.
func (s *Store) applyOne(h *store.Hit, v *algorithm.Verdict) {
	key := s.key(h)
	sh := &s.shards[key>>s.shift]
	now := s.now()
	sh.mu.Lock()
	if h.Limit.Kind == algorithm.TokenBucket {
		*v = sh.applyBucket(h.Limit, key, now, h.Cost, s.perShard)
	} else {
		state, found := sh.load(h.Limit.Kind, key)
		next, verdict := algorithm.Apply(h.Limit, state, now, h.Cost)
		if charged(h.Limit, verdict, h.Cost) {
			sh.save(h.Limit, key, next, found, now, s.perShard)
		}
		*v = verdict
	}
	sh.sweep(h.Limit.Kind, now)
	sh.mu.Unlock()
}

// charged reports whether a hit's new state is kept: one that changes
// something (cost not 0) and is admitted or charged always.
func charged(l algorithm.Limit, v algorithm.Verdict, cost int64) bool {
	return cost != 0 && (v.Allowed || l.Charge == algorithm.ChargeAlways)
}

// pending is a hit of a batch being decided.
type pending struct {
	key   uint64
	shard uint32
	// hit is the index of the hit in the batch; pendings are in the order
	// hits are decided, the always-charged ones first.
	hit int32
	// prev is the index of the previous pending on the same counter, or -1.
	prev int32
	// state is the counter after this hit: the hit's new state if it was
	// charged, else the state it saw.
	state algorithm.State
	// penalty is the counter's penalty state after this hit, when the hit
	// has a Penalty (penalized is then true).
	penalty   algorithm.PenaltyState
	penalized bool
}

// applyBatch is Apply for a batch of several hits: it locks every shard
// involved and decides the always-charged hits, then the others, as
// store.Store orders them; then it commits the always-charged hits, and
// the others all or none.
func (s *Store) applyBatch(hits []store.Hit, verdicts []algorithm.Verdict) {
	var inline [inlineHits]pending
	var inlineShards [inlineHits]uint32
	ps, locked := inline[:0], inlineShards[:0]
	if len(hits) > inlineHits {
		ps = make([]pending, 0, len(hits))
		locked = make([]uint32, 0, len(hits))
	}
	always := 0
	for i := range hits {
		if hits[i].Limit.Charge == algorithm.ChargeAlways {
			always++
		}
	}
	// Two passes over the batch when it mixes charges: the always-charged
	// hits, then the others.
	for pass := range 2 {
		if pass == 1 && (always == 0 || always == len(hits)) {
			break
		}
		for i := range hits {
			if always != 0 && always != len(hits) && (hits[i].Limit.Charge == algorithm.ChargeAlways) != (pass == 0) {
				continue
			}
			key := s.key(&hits[i])
			p := pending{key: key, shard: uint32(key >> s.shift), hit: int32(i), prev: -1}
			for j := len(ps) - 1; j >= 0; j-- {
				if ps[j].key == key {
					p.prev = int32(j)
					break
				}
			}
			ps = append(ps, p)
			if at, found := slices.BinarySearch(locked, p.shard); !found {
				locked = slices.Insert(locked, at, p.shard)
			}
		}
	}

	now := s.now()
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	rejected := false
	for k := range ps {
		p := &ps[k]
		h := &hits[p.hit]
		var state algorithm.State
		if p.prev >= 0 {
			state = ps[p.prev].state
		} else {
			state, _ = s.shards[p.shard].load(h.Limit.Kind, p.key)
		}
		var next algorithm.State
		var v algorithm.Verdict
		if h.Penalty != nil {
			before := s.penaltyBefore(ps, k)
			next, p.penalty, v = algorithm.ApplyPenalty(h.Limit, state, h.Penalty, before, now, h.Cost)
			p.penalized = true
		} else {
			next, v = algorithm.Apply(h.Limit, state, now, h.Cost)
		}
		verdicts[p.hit] = v
		p.state = state
		if v.Allowed || h.Limit.Charge == algorithm.ChargeAlways {
			p.state = next
		}
		if !v.Allowed && !h.Soft {
			rejected = true
		}
	}
	// The always-charged hits come first, so each counter is written in
	// the order its hits were decided, and an admitted hit of a rejected
	// batch reports its counter as the always-charged ones left it.
	// Penalty states are kept whatever the outcome.
	for k := range ps {
		p := &ps[k]
		h := &hits[p.hit]
		sh := &s.shards[p.shard]
		v := &verdicts[p.hit]
		if p.penalized {
			sh.savePenalty(h.Penalty, p.key, p.penalty, now, s.perShard)
		}
		switch {
		case h.Limit.Charge == algorithm.ChargeAlways:
			if charged(h.Limit, *v, h.Cost) {
				_, found := sh.load(h.Limit.Kind, p.key)
				sh.save(h.Limit, p.key, p.state, found, now, s.perShard)
			}
		case !v.Allowed:
		case rejected:
			// Nothing is charged: report the counter as it stays.
			state, _ := sh.load(h.Limit.Kind, p.key)
			_, c := algorithm.Apply(h.Limit, state, now, 0)
			*v = algorithm.Verdict{Allowed: true, Limit: c.Limit, Remaining: c.Remaining, ResetAfter: c.ResetAfter}
		case h.Cost != 0:
			_, found := sh.load(h.Limit.Kind, p.key)
			sh.save(h.Limit, p.key, p.state, found, now, s.perShard)
		}
	}
	for _, i := range locked {
		sh := &s.shards[i]
		for j := range ps {
			if ps[j].shard == i {
				sh.sweep(hits[ps[j].hit].Limit.Kind, now)
				break
			}
		}
		sh.mu.Unlock()
	}
}

// penaltyBefore returns the penalty state that pending k sees: as the
// latest earlier pending with a penalty on the same counter left it, else
// as stored.
func (s *Store) penaltyBefore(ps []pending, k int) algorithm.PenaltyState {
	for j := ps[k].prev; j >= 0; j = ps[j].prev {
		if ps[j].penalized {
			return ps[j].penalty
		}
	}
	return s.shards[ps[k].shard].loadPenalty(ps[k].key)
}

// key hashes a hit's counter identity (store.Hit.AppendIdentity).
// Identities up to keyBuffer bytes are encoded on the stack.
func (s *Store) key(h *store.Hit) uint64 {
	if maxIdentityLen(h) > shortKey {
		return s.longKey(h)
	}
	var buf [shortKey]byte
	return hashIdentity(s.seed, h.AppendIdentity(buf[:0]))
}

// longKey is key for identities longer than shortKey.
func (s *Store) longKey(h *store.Hit) uint64 {
	var buf [keyBuffer]byte
	return hashIdentity(s.seed, h.AppendIdentity(buf[:0]))
}

// maxIdentityLen returns an upper bound of the length of h's identity
// encoding.
func maxIdentityLen(h *store.Hit) int {
	n := len(h.Domain) + 2*binary.MaxVarintLen64 + 1 + 8
	for i := range h.Entries {
		n += len(h.Entries[i].Key) + len(h.Entries[i].Value) + 2*binary.MaxVarintLen64
	}
	return n
}

// hashIdentity hashes an identity encoding to a key.
func hashIdentity(seed maphash.Seed, b []byte) uint64 {
	if k := maphash.Bytes(seed, b); k != 0 {
		return k
	}
	return 1 // 0 marks an empty slot of a bucketTable
}

// Clear deletes the counters of hits and their penalty states (see
// "Clearing counters" in package store). It never fails.
func (s *Store) Clear(_ context.Context, counters []store.Hit) error {
	for i := range counters {
		h := &counters[i]
		key := s.key(h)
		sh := &s.shards[key>>s.shift]
		sh.mu.Lock()
		sh.delete(h.Limit.Kind, key)
		sh.delete(penaltyKind, key)
		sh.mu.Unlock()
	}
	return nil
}
