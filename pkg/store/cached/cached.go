package cached

import (
	"context"
	"errors"
	"fmt"
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
// back to: the Redis store in production, the memory store in tests.
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
	// Lifetime bounds a token-bucket lease: the fleet admits in any
	// interval d at most what the strict bucket admits in d + Lifetime.
	// 0 means 5 × RenewInterval. Window leases last until their window
	// ends.
	Lifetime time.Duration
	// IdleAfter is how long a counter may go without a hit before its
	// lease is returned and it is forgotten; 0 means 1 s.
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
	idle     int64 // µs
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

// decision is what Apply did with one hit.
type decision struct {
	c *counter
	// inner marks a hit sent to the inner store with cost strict.
	inner  bool
	strict int64
	// always marks hits taken from a lease by an always-charged hit,
	// never given back.
	always bool
	// probe marks a strict hit whose verdict tells its counter how much
	// is left.
	probe  bool
	parts  [2]part
	nparts int
}

// part is hits taken from one grant.
type part struct {
	seq   uint64
	n     int64
	lease algorithm.Lease
}

// leased reports whether h may be decided from a lease. A hit under a
// penalty never is: its rejections are strikes the shared store counts,
// and its cooldown is shared there.
func leased(h *store.Hit) bool {
	return h.Cached && h.Limit.Kind.Leasable() && h.Penalty == nil
}

// Apply implements store.Store. Cached hits of a leasable algorithm are
// decided from this instance's leases, reserving or waiting for one when
// a lease is empty; the others go to the inner store in one batch. The
// batch stays all or nothing (see the package doc).
func (s *Store) Apply(ctx context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	if len(verdicts) != len(hits) {
		return fmt.Errorf("cached store: %d verdicts for %d hits", len(verdicts), len(hits))
	}
	leasing := false
	for i := range hits {
		leasing = leasing || leased(&hits[i])
	}
	if !leasing || s.closed.Load() {
		s.m.paths[pathStrict].Add(int64(len(hits)))
		err := s.inner.Apply(ctx, hits, verdicts)
		s.observe(err)
		return err
	}
	var inline [inlineHits]decision
	ds := inline[:0]
	if len(hits) > inlineHits {
		ds = make([]decision, len(hits))
	}
	ds = ds[:len(hits)]
	now := s.now()
	rejected, strict := false, 0
	// Always-charged hits first, as store.Store's batch rule orders them.
	for pass := range 2 {
		for i := range hits {
			h := &hits[i]
			if (h.Limit.Charge == algorithm.ChargeAlways) != (pass == 0) {
				continue
			}
			d := &ds[i]
			if !leased(h) {
				d.inner, d.strict = true, h.Cost
				s.m.paths[pathStrict].Add(1)
			} else if err := s.decide(ctx, h, d, &verdicts[i], &now); err != nil {
				s.giveBack(ds, verdicts, now, false)
				return err
			}
			if d.inner {
				strict++
			} else if !verdicts[i].Allowed && !h.Soft {
				rejected = true
			}
		}
	}
	if strict > 0 {
		if err := s.applyStrict(ctx, hits, ds, verdicts, strict, rejected, now); err != nil {
			s.giveBack(ds, verdicts, now, false)
			return err
		}
		for i := range hits {
			if ds[i].inner && !verdicts[i].Allowed && !hits[i].Soft {
				rejected = true
			}
		}
	}
	if rejected {
		s.giveBack(ds, verdicts, now, true)
	}
	return nil
}

// applyStrict sends the hits marked inner to the inner store as one
// batch. When the batch is already rejected, hits that are not always
// charged are sent as checks (cost 0), for their statuses only.
func (s *Store) applyStrict(ctx context.Context, hits []store.Hit, ds []decision, verdicts []algorithm.Verdict, n int, rejected bool, now int64) error {
	var inlineH [inlineHits]store.Hit
	var inlineV [inlineHits]algorithm.Verdict
	var inlineI [inlineHits]int
	sh, sv, si := inlineH[:0], inlineV[:0], inlineI[:0]
	if n > inlineHits {
		sh, sv, si = make([]store.Hit, 0, n), make([]algorithm.Verdict, 0, n), make([]int, 0, n)
	}
	for i := range hits {
		if !ds[i].inner {
			continue
		}
		h := hits[i]
		h.Cost = ds[i].strict
		if rejected && h.Limit.Charge != algorithm.ChargeAlways {
			h.Cost = 0
		}
		sh, sv, si = append(sh, h), append(sv, algorithm.Verdict{}), append(si, i)
	}
	if err := s.inner.Apply(ctx, sh, sv); err != nil {
		s.observe(err)
		return err
	}
	for j, i := range si {
		verdicts[i] = sv[j]
		if d := &ds[i]; d.probe {
			sh := &s.shards[d.c.key%shardCount]
			sh.mu.Lock()
			d.c.strictAnswer(sv[j], hits[i].Cost, now, s.interval)
			sh.mu.Unlock()
		}
	}
	return nil
}

// decide decides one cached hit at *now: from the lease when it has room,
// else after waiting for or making a reservation; what no lease covers is
// marked for the inner store. After a wait it reads the clock again into
// *now: a lease that ended meanwhile must not be spent.
func (s *Store) decide(ctx context.Context, h *store.Hit, d *decision, v *algorithm.Verdict, nowp *int64) error {
	now := *nowp
	if h.Cost < 0 {
		// A refund goes to the shared counter, where it helps every
		// instance; a counter known to be over may admit again.
		s.forgetOver(h)
		d.inner, d.strict = true, h.Cost
		s.m.paths[pathStrict].Add(1)
		return nil
	}
	for attempt := range attempts {
		sh, c := s.counter(h, now)
		if attempt == 0 {
			c.touch(h, now, s.interval)
		}
		res := c.spend(s, h, d, v, now)
		if res == spendEmpty && attempt == attempts-1 {
			// Other hits took what the reservations brought: the shared
			// counter decides.
			d.inner, d.strict = true, h.Cost
			res = spendStrict
		}
		switch res {
		case spendLocal:
			s.maybeRenew(c, now)
			sh.mu.Unlock()
			if attempt == 0 {
				s.m.paths[pathLocal].Add(1)
			} else {
				s.m.paths[pathRenewalWait].Add(1)
			}
			return nil
		case spendOver:
			sh.mu.Unlock()
			s.m.paths[pathOverLimit].Add(1)
			return nil
		case spendStrict:
			sh.mu.Unlock()
			s.m.paths[pathStrict].Add(1)
			return nil
		}
		sh.mu.Unlock()
		if err := s.acquire(ctx, c, h.Cost); err != nil {
			return err
		}
		now = s.now()
		*nowp = now
	}
	panic("unreachable")
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
	}
}

// remove forgets c, whose shard is locked, and queues the return of its
// unspent hits.
func (s *Store) remove(sh *shard, c *counter) {
	delete(sh.m, c.key)
	c.gone = true
	c.release(s)
}

// renewal is a reservation in flight for a counter.
type renewal struct {
	// done is closed when the reservation is answered, after err is set.
	done chan struct{}
	// err is the failure the hits waiting for it give up with; nil when
	// it succeeded, or failed only because its caller's context ended
	// (the waiters then try themselves).
	err error
}

// acquire makes sure a reservation for c has been answered since the call:
// it waits for the one in flight, or reserves at least need hits itself.
// A wait ends early, with an error, when that reservation fails or the
// shared store refuses a call meanwhile: a hung store then costs a hit no
// more than the breaker takes to open, not its whole deadline.
func (s *Store) acquire(ctx context.Context, c *counter, need int64) error {
	sh := &s.shards[c.key%shardCount]
	sh.mu.Lock()
	if c.gone {
		sh.mu.Unlock()
		return nil
	}
	if r := c.renewing; r != nil {
		sh.mu.Unlock()
		s.mu.Lock()
		refused := s.refused
		s.mu.Unlock()
		select {
		case <-r.done:
			if r.err != nil {
				return fmt.Errorf("cached store: waiting for a lease: %w", r.err)
			}
			return nil
		case <-refused:
			s.mu.Lock()
			err := s.refusal
			s.mu.Unlock()
			return fmt.Errorf("cached store: waiting for a lease: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("cached store: waiting for a lease: %w: %w", store.ErrUnavailable, ctx.Err())
		}
	}
	r := &renewal{done: make(chan struct{})}
	c.renewing = r
	req := c.request(s, need)
	sh.mu.Unlock()
	at := s.now()
	var lease [1]algorithm.Lease
	err := s.leaser.Reserve(ctx, []store.LeaseRequest{req}, lease[:])
	s.m.call(ctx, opReserve, err)
	s.observe(err)
	if err != nil && ctx.Err() == nil {
		r.err = err
	}
	s.finish(c, r, at, lease[0], err)
	if err != nil {
		return fmt.Errorf("cached store: reserving a lease: %w", err)
	}
	if s.closed.Load() {
		// Close may have collected its returns already: give back what
		// this reservation brought to a forgotten counter at once.
		return s.flushReturns(ctx)
	}
	return nil
}

// finish installs the answer of a reservation made at at for c and wakes
// whoever waits for it.
func (s *Store) finish(c *counter, r *renewal, at int64, lease algorithm.Lease, err error) {
	sh := &s.shards[c.key%shardCount]
	sh.mu.Lock()
	c.renewing = nil
	close(r.done)
	if err == nil {
		s.m.granted(lease.Hits)
		c.install(s, at, lease)
	}
	sh.mu.Unlock()
}

// maybeRenew queues a background renewal of c, whose shard is locked,
// when its lease runs low: a quarter of the last grant or less is left,
// or a token-bucket lease ends within one RenewInterval with no other
// grant held.
func (s *Store) maybeRenew(c *counter, now int64) {
	if c.renewing != nil || c.queued || c.gone || c.overUntil > now {
		return
	}
	if c.leftAt(now) < aheadBelow {
		// Near the limit a hit reserved ahead may sit here while another
		// instance is refused it: reserve only on demand.
		return
	}
	room := c.room()
	low := room*4 <= c.lastHits
	if !low && c.limit.Kind == algorithm.TokenBucket && c.grants[1].lease.Hits == 0 {
		low = c.grants[0].lease.Until-now <= s.interval
	}
	if !low {
		return
	}
	c.queued = true
	s.mu.Lock()
	s.renewals = append(s.renewals, c)
	s.mu.Unlock()
	s.wake()
}

// observe takes in the outcome of a call to the shared store: a refusal
// (a store.RetryAfterError, such as an open breaker's) wakes the hits
// waiting for reservations, which give up with it.
func (s *Store) observe(err error) {
	var refusal store.RetryAfterError
	if err == nil || !errors.Is(err, store.ErrUnavailable) || !errors.As(err, &refusal) {
		return
	}
	s.mu.Lock()
	s.refusal = err
	close(s.refused)
	s.refused = make(chan struct{})
	s.mu.Unlock()
}

func (s *Store) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// queueReturn queues the return of unspent hits of lease on c.
func (s *Store) queueReturn(c *counter, lease algorithm.Lease, unspent int64) {
	if unspent <= 0 || c.cleared {
		return
	}
	s.mu.Lock()
	s.returns = append(s.returns, store.LeaseReturn{Counter: c.identity(), Lease: lease, Unspent: unspent})
	s.mu.Unlock()
}

// giveBack undoes the local spends of the hits that are not always
// charged; with status, the admitted ones then report their counters as
// they stand.
func (s *Store) giveBack(ds []decision, verdicts []algorithm.Verdict, now int64, status bool) {
	queued := false
	for i := range ds {
		d := &ds[i]
		if d.c == nil || d.always || d.inner {
			continue
		}
		sh := &s.shards[d.c.key%shardCount]
		sh.mu.Lock()
		for _, p := range d.parts[:d.nparts] {
			if !d.c.unspend(p) {
				s.queueReturn(d.c, p.lease, p.n)
				queued = true
			}
		}
		d.nparts = 0
		if status && verdicts[i].Allowed {
			verdicts[i] = d.c.status(now)
		}
		sh.mu.Unlock()
	}
	if queued {
		s.wake()
	}
}

// run is the Store's goroutine: it sends queued renewals and returns, and
// every RenewInterval ends expired leases and idle counters.
func (s *Store) run(ctx context.Context) {
	defer close(s.done)
	tick := time.NewTicker(time.Duration(s.interval) * time.Microsecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-tick.C:
			s.sweep(s.now())
		}
		s.renew(ctx)
		call, cancel := context.WithTimeout(ctx, s.timeout)
		if err := s.flushReturns(call); err != nil {
			s.log.Warn("returning leases", slog.Any("error", err))
		}
		cancel()
	}
}

// renew sends every queued renewal in one Reserve call.
func (s *Store) renew(ctx context.Context) {
	s.mu.Lock()
	queued := s.renewals
	s.renewals = nil
	s.mu.Unlock()
	if len(queued) == 0 {
		return
	}
	cs := queued[:0]
	reqs := make([]store.LeaseRequest, 0, len(queued))
	rs := make([]*renewal, 0, len(queued))
	for _, c := range queued {
		sh := &s.shards[c.key%shardCount]
		sh.mu.Lock()
		c.queued = false
		if !c.gone && c.renewing == nil {
			r := &renewal{done: make(chan struct{})}
			c.renewing = r
			reqs = append(reqs, c.request(s, 1))
			cs, rs = append(cs, c), append(rs, r)
		}
		sh.mu.Unlock()
	}
	if len(cs) == 0 {
		return
	}
	at := s.now()
	leases := make([]algorithm.Lease, len(reqs))
	call, cancel := context.WithTimeout(ctx, s.timeout)
	err := s.leaser.Reserve(call, reqs, leases)
	cancel()
	s.m.call(ctx, opReserve, err)
	s.observe(err)
	if err != nil {
		s.log.Warn("renewing leases", slog.Int("counters", len(reqs)), slog.Any("error", err))
	}
	for i, c := range cs {
		rs[i].err = err
		s.finish(c, rs[i], at, leases[i], err)
	}
}

// flushReturns sends every queued return in one Return call.
func (s *Store) flushReturns(ctx context.Context) error {
	s.mu.Lock()
	returns := s.returns
	s.returns = nil
	s.mu.Unlock()
	if len(returns) == 0 {
		return nil
	}
	err := s.leaser.Return(ctx, returns)
	s.m.call(ctx, opReturn, err)
	s.observe(err)
	if err != nil {
		return fmt.Errorf("cached store: returning %d leases: %w", len(returns), err)
	}
	var n int64
	for i := range returns {
		n += returns[i].Unspent
	}
	s.m.returned.Add(ctx, n)
	return nil
}

// sweep ends expired grants and forgets counters idle for IdleAfter.
func (s *Store) sweep(now int64) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, c := range sh.m {
			c.expire(s, now)
			if now-c.used >= s.idle && c.renewing == nil && !c.queued {
				s.remove(sh, c)
			}
		}
		sh.mu.Unlock()
	}
}

// Drop ends the leases of the counters for which match reports true, and
// forgets them; it returns how many. The app calls it when a reload
// changes or removes the rules of leased counters. The unspent hits are
// given back in the background.
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
