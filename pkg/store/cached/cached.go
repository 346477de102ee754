package cached

import (
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// Leaser is the shared counter that leases are reserved from and given
// back to: in production the circuit breaker in front of the Redis store,
// so that reservations and returns that fail open it too; in tests the
// memory store.
//
// Reserve grants leases[i] for reqs[i] as algorithm.Reserve does, each
// charged to its counter at once; len(leases) equals len(reqs). Return
// gives back unspent hits as algorithm.Return does. Both report an outage
// wrapping store.ErrUnavailable.
type Leaser interface {
	Reserve(ctx context.Context, reqs []store.LeaseRequest, leases []algorithm.Lease) error
	Return(ctx context.Context, returns []store.LeaseReturn) error
}

// Options configures a Store. Inner and Leaser are required; the zero
// value of every other field works.
type Options struct {
	// Inner decides the hits that are not leased (strict precision, the
	// sliding-window log, refunds, what a lease cannot cover). It must
	// count on the same counters as Leaser.
	Inner store.Store
	// Leaser reserves and takes back leases.
	Leaser Leaser
	// RenewInterval is the span of demand a lease is sized for, and the
	// tick of the background work (expiry, idle returns); 0 means 100 ms.
	RenewInterval time.Duration
	// Lifetime bounds a token-bucket lease granted with half its bucket
	// left or less; one granted from a fuller bucket lives longer, up to
	// MaxLifetime from a full one (see the package doc). 0 means 5 ×
	// RenewInterval. Window leases last until their window ends.
	Lifetime time.Duration
	// MaxLifetime bounds a token-bucket lease granted from a full bucket;
	// 0 means 30 s, and a MaxLifetime below Lifetime means Lifetime.
	MaxLifetime time.Duration
	// IdleAfter is how long a counter may go without a hit at least
	// before its lease is returned and it is forgotten (longer for one
	// whose hits come further apart, or that holds no lease: see the
	// package doc); 0 means 1 s.
	IdleAfter time.Duration
	// Timeout bounds a background Leaser call; 0 means 1 s.
	Timeout time.Duration
	// MaxKeys bounds the counters held; 0 means 1 000 000. A counter added
	// to a full shard evicts the least recently used of a sample, whose
	// lease is returned.
	MaxKeys int
	// Now is the clock; nil means time.Now. It must read the same time as
	// the Leaser's counters (Lease.Until is compared with it).
	Now func() time.Time
	// MeterProvider provides the tollgate_cached_* instruments; nil means
	// a no-op provider.
	MeterProvider metric.MeterProvider
	// Logger logs failed background calls; nil discards.
	Logger *slog.Logger
}

const (
	defaultRenewInterval = 100 * time.Millisecond
	defaultMaxLifetime   = 30 * time.Second
	defaultIdleAfter     = time.Second
	defaultTimeout       = time.Second
	defaultMaxKeys       = 1_000_000
	shardCount           = 64
	// evictSample is how many counters an eviction compares.
	evictSample = 8
	// inlineHits is the batch size decided without allocating.
	inlineHits = 8
	// attempts bounds the reservations one hit may wait for before it is
	// decided strictly.
	attempts = 3
	// shareDivisor caps a lease at what its counter held for everyone at
	// the last answer divided by shareDivisor (see the package doc).
	shareDivisor = 64
	// strictBelow is the remainder below which a hit no lease covers is
	// decided strictly, and aheadBelow the one below which nothing is
	// reserved ahead: a hit held in a lease while the counter is at its
	// limit turns every rejection meanwhile into a false one, and a
	// saturated sliding window or bucket, which frees room continuously,
	// stays that near its limit.
	strictBelow = 4 * shareDivisor
	aheadBelow  = 2 * strictBelow
	// maxIdle bounds how long a counter without a lease is kept without
	// a hit (see counter.idleAfter).
	maxIdle = time.Minute
	// idleSweeps is how many RenewIntervals apart the sweep looks for
	// idle counters among all of them; in between it visits only those
	// that hold leases, so that a store of many counters kept to learn
	// their gaps costs little to sweep.
	idleSweeps = 10
)

// Store is a store.Store that decides cached hits from leases and passes
// the rest to its inner store. It is safe for concurrent use; Close stops
// its goroutine and returns every lease.
type Store struct {
	inner    store.Store
	leaser   Leaser
	now      func() int64 // µs
	interval int64        // µs
	lifetime time.Duration
	longest  time.Duration // MaxLifetime
	idle     int64         // µs
	timeout  time.Duration
	perShard int
	seed     maphash.Seed
	log      *slog.Logger
	shards   [shardCount]shard

	mu       sync.Mutex // guards renewals, returns and refusals
	renewals []*counter
	returns  []store.LeaseReturn
	kick     chan struct{}
	// refused is closed, and replaced, when the shared store refuses a
	// call (an open circuit breaker), with refusal its error: hits that
	// wait for a reservation give up then.
	refused chan struct{}
	refusal error

	// sweeps counts the calls of sweep, made by the Store's goroutine
	// alone.
	sweeps int

	closed atomic.Bool
	cancel context.CancelFunc
	done   chan struct{}
	m      *metrics
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Clearer = (*Store)(nil)
)

// shard is one locked part of the counters.
type shard struct {
	mu sync.Mutex
	m  map[uint64]*counter
	// leased holds the counters of m that may hold grants: the ones the
	// sweep of every RenewInterval visits, where the whole of m is
	// visited once every idleSweeps.
	leased map[uint64]*counter
}

// New returns a Store in front of opts.Inner and opts.Leaser and starts
// its goroutine, which Close stops. It panics if either is nil, a
// programming error.
func New(opts Options) *Store {
	if opts.Inner == nil || opts.Leaser == nil {
		panic("cached: Options.Inner and Options.Leaser are required")
	}
	s := &Store{
		inner:    opts.Inner,
		leaser:   opts.Leaser,
		interval: orDefault(opts.RenewInterval, defaultRenewInterval).Microseconds(),
		idle:     orDefault(opts.IdleAfter, defaultIdleAfter).Microseconds(),
		timeout:  orDefault(opts.Timeout, defaultTimeout),
		seed:     maphash.MakeSeed(),
		log:      opts.Logger,
		kick:     make(chan struct{}, 1),
		refused:  make(chan struct{}),
		done:     make(chan struct{}),
	}
	s.lifetime = orDefault(opts.Lifetime, 5*time.Duration(s.interval)*time.Microsecond)
	s.longest = max(s.lifetime, orDefault(opts.MaxLifetime, defaultMaxLifetime))
	clock := opts.Now
	if clock == nil {
		clock = time.Now
	}
	s.now = func() int64 { return algorithm.Micros(clock()) }
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "cached")
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = defaultMaxKeys
	}
	s.perShard = max(1, maxKeys/shardCount)
	for i := range s.shards {
		s.shards[i].m = make(map[uint64]*counter)
		s.shards[i].leased = make(map[uint64]*counter)
	}
	s.m = newMetrics(opts.MeterProvider, s)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.run(ctx)
	return s
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Len returns the number of counters held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// counter returns h's counter, created if need be, with its shard locked.
func (s *Store) counter(h *store.Hit, now int64) (*shard, *counter) {
	key := s.key(h)
	sh := &s.shards[key%shardCount]
	sh.mu.Lock()
	c := sh.m[key]
	if c == nil {
		if len(sh.m) >= s.perShard {
			s.evict(sh)
		}
		c = newCounter(h, key)
		sh.m[key] = c
	}
	return sh, c
}

// forgetOver clears the over-limit state of h's counter, if held.
func (s *Store) forgetOver(h *store.Hit) {
	key := s.key(h)
	sh := &s.shards[key%shardCount]
	sh.mu.Lock()
	if c := sh.m[key]; c != nil {
		c.overUntil = 0
	}
	sh.mu.Unlock()
}

// evict removes the least recently used counter among a sample of a full
// shard, returning its lease. A reservation in flight for it is given back
// when it is answered.
func (s *Store) evict(sh *shard) {
	var victim *counter
	n := 0
	for _, c := range sh.m {
		if victim == nil || c.used < victim.used {
			victim = c
		}
		if n++; n == evictSample {
			break
		}
	}
	if victim != nil {
		s.remove(sh, victim)
		s.m.evictions.Add(1)
		s.wake() // give its lease back now, not at the next tick
	}
}

// remove forgets c, whose shard is locked, and queues the return of its
// unspent hits.
func (s *Store) remove(sh *shard, c *counter) {
	delete(sh.m, c.key)
	delete(sh.leased, c.key)
	c.gone = true
	c.release(s)
}

// Drop ends the leases of the counters for which match reports true, and
// forgets them; it returns how many. It is what a changed override asks
// of the counters it covers (package fleet's Handler); a reload calls
// Reset. The unspent hits are given back in the background.
func (s *Store) Drop(match func(store.Counter) bool) int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, c := range sh.m {
			h := c.identity()
			if match(h.Counter()) {
				s.remove(sh, c)
				n++
			}
		}
		sh.mu.Unlock()
	}
	s.wake()
	return n
}

// Reset ends every lease and forgets every counter, as Drop does.
func (s *Store) Reset() int {
	return s.Drop(func(store.Counter) bool { return true })
}

// Clear forgets the counters here without giving their leases back (the
// shared counters are cleared, so the leased hits are no longer charged
// anywhere), then passes the call to the inner store, or returns
// store.ErrCannotClear when it cannot clear. The Leaser must count on the
// same counters as the inner store. A reservation in flight for a cleared
// counter is not given back either: if Redis charged it before the clear
// it is gone, and if after, it stays charged until its window ends (a
// false rejection, never overage).
func (s *Store) Clear(ctx context.Context, counters []store.Hit) error {
	// Forgotten again after: a hit decided meanwhile may have leased under
	// the old count.
	return store.ClearWrapped(ctx, s.inner, counters, s.Forget)
}

// Forget forgets the counters here without giving their leases back, as
// Clear does, without clearing them in the inner store: what another
// instance's reset asks of this one.
func (s *Store) Forget(counters []store.Counter) {
	for i := range counters {
		key := s.counterKey(&counters[i])
		sh := &s.shards[key%shardCount]
		sh.mu.Lock()
		if c := sh.m[key]; c != nil {
			c.cleared = true
			s.remove(sh, c)
		}
		sh.mu.Unlock()
	}
}

// ErrClosed is returned by a second Close.
var ErrClosed = errors.New("cached store closed")

// Close stops the Store's goroutine and gives back every unspent hit in
// one Return call bounded by ctx. Hits applied after Close go to the inner
// store.
func (s *Store) Close(ctx context.Context) error {
	if !s.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	s.cancel()
	<-s.done
	s.Reset()
	return s.flushReturns(ctx)
}

// key hashes a hit's counter identity (store.Hit.AppendIdentity).
func (s *Store) key(h *store.Hit) uint64 {
	var buf [256]byte
	return maphash.Bytes(s.seed, h.AppendIdentity(buf[:0]))
}

// counterKey hashes a counter's identity as key does its hits'.
func (s *Store) counterKey(c *store.Counter) uint64 {
	var buf [256]byte
	return maphash.Bytes(s.seed, c.AppendIdentity(buf[:0]))
}
