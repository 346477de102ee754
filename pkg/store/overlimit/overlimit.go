// Package overlimit answers hits on counters known to be over their limit
// without asking the store behind it, until the time that store said the
// counter admits again. It is meant to wrap the Redis store (above its
// circuit breaker), so that traffic that is over its limit costs no round
// trip; it is tollgate's counterpart of envoyproxy/ratelimit's local cache
// (LOCAL_CACHE_SIZE_IN_BYTES).
//
// # What is remembered
//
// After a batch comes back from the store, every hit of cost 1 that was
// rejected with Remaining 0 and a positive RetryAfter (and whose limit has
// a capacity of at least 1, so the rejection is not the fixed one-Period
// answer of a hit no wait can admit) is remembered under its counter's
// identity (domain, shard, entries, algorithm and period) together with
// the limit's Requests and Burst, the verdict and the time read just
// before the store was asked. The entry lives until that time plus
// RetryAfter. A counter hit twice in one batch is not remembered from that
// batch, since its second hit saw the first one's charge, which a rejected
// batch undoes.
//
// # What is answered locally
//
// A batch is answered without the store only when every one of its hits
// has cost 1 and a live entry with the same Requests and Burst. Each then
// gets the remembered verdict with ResetAfter and RetryAfter reduced by
// the time elapsed since it was remembered (in whole µs, as the
// algorithms count): Allowed false, Remaining 0 and the same Limit. With
// no other traffic on the counter this is exactly what the store would
// answer, for all four algorithms, since a rejected hit changes no state
// and a cost-1 hit that is rejected sees Remaining 0 until its RetryAfter.
// Any other batch, including one that mixes known and unknown counters,
// or has Soft hits on unknown counters, or checks (cost 0), goes to the
// store whole: the verdicts of its other hits come from counters only the
// store knows. So does every batch with an always-charged hit
// (algorithm.ChargeAlways), known counter or not: its cost must reach the
// counter. Its verdict is not remembered (it tells when the counter is back
// at its limit, not when a hit fits), and the entry of its counter stays,
// since a charge only puts the counter further past its limit. So does
// every batch with a hit under a penalty (store.Hit.Penalty), whose
// verdicts are never remembered either: each rejection of such a hit may
// be a strike that escalates its client's cooldown, and the store keeps
// the penalty state the whole fleet shares, so the cache must not absorb
// them.
//
// # What it does not guarantee
//
// Other instances of a fleet keep counting on a shared counter; a local
// answer reflects the counter as it was when it was remembered, so its
// ResetAfter and RetryAfter may be shorter than the store's current ones
// (never longer: the remembered time is read before the store decides).
// Nothing answered locally admits a hit, so the cache can only reject, and
// only until a time the store itself gave.
//
// Entries are dropped when anything could make their counter admit again
// early: a refund (negative cost) on the counter drops it before the batch
// goes to the store, and a hit whose Requests or Burst differ (a reload
// that changed the limit) misses and drops it. Time running backwards
// (an earlier now than the remembered one) misses too.
//
// # Memory
//
// The cache holds at most MaxBytes, estimated per entry as the length of
// its key plus EntryOverhead bytes (the map slot, the string header and
// the entry value, with Go's map load factor). It is split into shards,
// each with an equal share of the budget; a shard that is full drops
// the expired ones among a few entries it looks at, then any entry, in Go's map iteration order
// (pseudo-random), until the new one fits. Expired entries are otherwise
// dropped lazily, when looked up. No goroutine is started.
package overlimit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// EntryOverhead is the estimated size in bytes of one entry besides its
// key: the entry value (72 bytes), the string header (16) and the map
// slot and growth headroom (about 40).
const EntryOverhead = 128

// shardCount is the number of independently locked shards.
const shardCount = 16

// maxBatch is the largest batch answered locally; larger ones go to the
// store.
const maxBatch = 16

// Options configures a Store.
type Options struct {
	// MaxBytes bounds the estimated memory of the entries; it must be
	// positive.
	MaxBytes int64
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// MeterProvider provides tollgate_overlimit_cache_hits and
	// tollgate_overlimit_cache_entries; nil means a no-op provider.
	MeterProvider metric.MeterProvider
}

// Store is a store.Store that answers hits on counters known to be over
// their limit locally and passes everything else to the store it wraps.
type Store struct {
	next   store.Store
	now    func() time.Time
	seed   maphash.Seed
	shards [shardCount]shard
	hits   metric.Int64Counter
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Clearer = (*Store)(nil)
)

// shard is one locked part of the cache.
type shard struct {
	mu      sync.Mutex
	entries map[string]entry
	bytes   int64
	max     int64
}

// entry is a remembered rejection.
type entry struct {
	requests, burst int64
	verdict         algorithm.Verdict
	at              int64 // µs, read before the store decided
	until           int64 // µs, at + RetryAfter
}

// New returns next behind an over-limit cache of opts.MaxBytes.
func New(next store.Store, opts Options) (*Store, error) {
	if next == nil {
		return nil, errors.New("overlimit: no store")
	}
	if opts.MaxBytes <= 0 {
		return nil, fmt.Errorf("overlimit: cache size %d is not positive", opts.MaxBytes)
	}
	s := &Store{next: next, now: opts.Now, seed: maphash.MakeSeed()}
	if s.now == nil {
		s.now = time.Now
	}
	for i := range s.shards {
		s.shards[i].entries = make(map[string]entry)
		s.shards[i].max = opts.MaxBytes / shardCount
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter("github.com/tollgatehq/tollgate/pkg/store/overlimit")
	var err error
	if s.hits, err = meter.Int64Counter("tollgate_overlimit_cache_hits",
		metric.WithDescription("Hits answered as over the limit from the local over-limit cache, without the store.")); err != nil {
		return nil, fmt.Errorf("overlimit: creating instruments: %w", err)
	}
	gauge, err := meter.Int64ObservableGauge("tollgate_overlimit_cache_entries",
		metric.WithDescription("Counters held in the local over-limit cache, including expired ones not yet dropped."))
	if err != nil {
		return nil, fmt.Errorf("overlimit: creating instruments: %w", err)
	}
	if _, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(gauge, int64(s.Len()))
		return nil
	}, gauge); err != nil {
		return nil, fmt.Errorf("overlimit: creating instruments: %w", err)
	}
	return s, nil
}

// Len returns the number of entries held, including expired ones not yet
// dropped.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}

// Bytes returns the estimated size of the entries held.
func (s *Store) Bytes() int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.bytes
		sh.mu.Unlock()
	}
	return n
}

// Apply answers the batch locally when every hit is on a counter known to
// be over its limit, and otherwise asks the store and remembers the
// rejections it reports.
func (s *Store) Apply(ctx context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	if len(hits) != len(verdicts) {
		return s.next.Apply(ctx, hits, verdicts)
	}
	now := algorithm.Micros(s.now())
	// ends[i] is where hit i's key ends in buf; keys are built once, and
	// looked up without becoming strings.
	var scratch [512]byte
	var endsBuf [maxBatch]int
	buf := scratch[:0]
	ends := endsBuf[:0]
	local := len(hits) > 0 && len(hits) <= maxBatch
	for i := range hits {
		h := &hits[i]
		c := h.Counter()
		buf = appendKey(buf, &c)
		ends = append(ends, len(buf))
		k := keyAt(buf, ends, i)
		switch {
		case h.Cost < 0:
			s.drop(k)
			local = false
		case local && answerable(h):
			local = s.lookup(k, h.Limit, now, &verdicts[i])
		default:
			local = false
		}
	}
	if local {
		s.hits.Add(ctx, int64(len(hits)))
		return nil
	}
	if err := s.next.Apply(ctx, hits, verdicts); err != nil {
		return err
	}
	for i := range hits {
		if remembered(&hits[i], &verdicts[i]) && !repeated(buf, ends, i) {
			s.remember(string(keyAt(buf, ends, i)), hits[i].Limit, verdicts[i], now)
		}
	}
	return nil
}

// keyAt returns the key of hit i from the keys built into buf.
func keyAt(buf []byte, ends []int, i int) []byte {
	if i == 0 {
		return buf[:ends[0]]
	}
	return buf[ends[i-1]:ends[i]]
}

// answerable reports whether the cache may answer h: a hit of cost 1,
// not always charged (such a hit's rejection tells when the counter is
// back at its limit, not when a hit fits again) and under no penalty
// (such a hit must reach the store every time).
func answerable(h *store.Hit) bool {
	return h.Cost == 1 && h.Limit.Charge != algorithm.ChargeAlways && h.Penalty == nil
}

// remembered reports whether a hit's verdict is one the cache keeps: a
// rejection of an answerable hit that says when a hit fits again.
func remembered(h *store.Hit, v *algorithm.Verdict) bool {
	return answerable(h) && !v.Allowed && v.Remaining == 0 && v.RetryAfter > 0 && h.Limit.Capacity() >= 1
}

// repeated reports whether the key of hit i occurs twice in buf.
func repeated(buf []byte, ends []int, i int) bool {
	k := keyAt(buf, ends, i)
	for j := range ends {
		if j != i && string(keyAt(buf, ends, j)) == string(k) {
			return true
		}
	}
	return false
}

// appendKey appends the identity of a counter to b.
func appendKey(b []byte, c *store.Counter) []byte {
	b = strconv.AppendInt(b, int64(c.Kind), 10)
	b = append(b, '\x00')
	b = strconv.AppendInt(b, c.Period, 10)
	b = append(b, '\x00')
	b = appendField(b, c.Domain)
	b = appendField(b, c.Shard)
	for _, e := range c.Entries {
		b = appendField(b, e.Key)
		b = appendField(b, e.Value)
	}
	return b
}

// appendField appends a length-prefixed field, so that no two different
// hits share a key.
func appendField(b []byte, f string) []byte {
	b = strconv.AppendInt(b, int64(len(f)), 10)
	b = append(b, ':')
	return append(b, f...)
}

// shardOf returns the shard holding k.
func (s *Store) shardOf(k []byte) *shard {
	return &s.shards[maphash.Bytes(s.seed, k)%shardCount]
}

// size is the estimated memory of an entry under k.
func size(k string) int64 { return int64(len(k)) + EntryOverhead }

// lookup fills v with the local verdict for a hit on k and reports
// whether there was one. A stale entry, or one of another limit, is
// dropped.
func (s *Store) lookup(k []byte, l algorithm.Limit, now int64, v *algorithm.Verdict) bool {
	sh := s.shardOf(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.entries[string(k)]
	if !ok {
		return false
	}
	if now >= e.until || now < e.at || e.requests != l.Requests || e.burst != l.Burst {
		sh.remove(string(k))
		return false
	}
	elapsed := time.Duration(now-e.at) * time.Microsecond
	*v = e.verdict
	v.ResetAfter = max(v.ResetAfter-elapsed, 0)
	v.RetryAfter -= elapsed
	return true
}

// remember stores the rejection v of a hit on k, decided at or after now.
func (s *Store) remember(k string, l algorithm.Limit, v algorithm.Verdict, now int64) {
	sh := s.shardOf([]byte(k))
	need := size(k)
	if need > sh.max {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.entries[k]; ok {
		sh.remove(k)
	}
	if sh.bytes+need > sh.max {
		sh.evict(now, need)
	}
	sh.entries[k] = entry{
		requests: l.Requests,
		burst:    l.Burst,
		verdict:  v,
		at:       now,
		until:    now + v.RetryAfter.Microseconds(),
	}
	sh.bytes += need
}

// drop forgets the counter k.
func (s *Store) drop(k []byte) {
	sh := s.shardOf(k)
	sh.mu.Lock()
	sh.remove(string(k))
	sh.mu.Unlock()
}

// remove deletes k, if held; sh.mu must be held.
func (sh *shard) remove(k string) {
	if _, ok := sh.entries[k]; ok {
		delete(sh.entries, k)
		sh.bytes -= size(k)
	}
}

// evictScan is how many entries evict looks at for expired ones before
// it drops live ones.
const evictScan = 8

// evict makes room for need bytes: expired entries among the first
// evictScan met in map order first, then any; sh.mu must be held.
func (sh *shard) evict(now, need int64) {
	n := 0
	for k, e := range sh.entries {
		if n++; n > evictScan || sh.bytes+need <= sh.max {
			break
		}
		if now >= e.until {
			sh.remove(k)
		}
	}
	for k := range sh.entries {
		if sh.bytes+need <= sh.max {
			return
		}
		sh.remove(k)
	}
}

// Clear forgets the counters' entries, then passes the call to the store
// it wraps, or returns store.ErrCannotClear when that store cannot clear.
// The entries are forgotten first and again after the store has cleared,
// so that a batch answered meanwhile cannot leave one behind.
func (s *Store) Clear(ctx context.Context, counters []store.Hit) error {
	return store.ClearWrapped(ctx, s.next, counters, s.Forget)
}

// Forget drops the entries of the counters, so that their next hits go to
// the store. It is what another instance's reset asks of this one.
func (s *Store) Forget(counters []store.Counter) {
	var scratch [512]byte
	for i := range counters {
		s.drop(appendKey(scratch[:0], &counters[i]))
	}
}

// Drop forgets the entries whose counters match reports true for, and
// returns how many. It is for changes that name counters by a prefix of
// their entries, such as an override.
func (s *Store) Drop(match func(store.Counter) bool) int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k := range sh.entries {
			c, ok := parseKey(k)
			if ok && match(c) {
				sh.remove(k)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// parseKey recovers the counter from a key appendKey built.
func parseKey(k string) (c store.Counter, ok bool) {
	// kind \0 period \0 then length-prefixed fields: domain, shard, then
	// key and value of every entry.
	var nums [2]int64
	for j := range nums {
		i := strings.IndexByte(k, 0)
		if i < 0 {
			return store.Counter{}, false
		}
		n, err := strconv.ParseInt(k[:i], 10, 64)
		if err != nil {
			return store.Counter{}, false
		}
		nums[j], k = n, k[i+1:]
	}
	if nums[0] < 0 || nums[0] > math.MaxUint8 {
		return store.Counter{}, false
	}
	c.Kind, c.Period = algorithm.Kind(nums[0]), nums[1]
	field := func() (string, bool) {
		i := strings.IndexByte(k, ':')
		if i < 0 {
			return "", false
		}
		n, err := strconv.Atoi(k[:i])
		if err != nil || n < 0 || n > len(k)-i-1 {
			return "", false
		}
		f := k[i+1 : i+1+n]
		k = k[i+1+n:]
		return f, true
	}
	if c.Domain, ok = field(); !ok {
		return store.Counter{}, false
	}
	if c.Shard, ok = field(); !ok {
		return store.Counter{}, false
	}
	for k != "" {
		key, ok1 := field()
		value, ok2 := field()
		if !ok1 || !ok2 {
			return store.Counter{}, false
		}
		c.Entries = append(c.Entries, store.Entry{Key: key, Value: value})
	}
	return c, true
}
