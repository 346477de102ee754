package cached

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

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
		if c.room() > 0 && !c.gone {
			sh.leased[c.key] = c
		}
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
	low := c.room()*4 <= c.lastHits
	if !low && c.limit.Kind == algorithm.TokenBucket && c.grants[1].lease.Hits == 0 {
		low = c.grants[0].lease.Until-now <= s.interval
	}
	// Near the limit a hit reserved ahead may sit here while another
	// instance is refused it, and a counter too sparse to spend it would
	// give it back: reserve only on demand. (Asked only of a lease
	// running low, as every local hit passes here.)
	if !low || c.leftAt(now) < aheadBelow || c.expected(s, now) < 2 {
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

// sweep ends expired grants, and forgets counters that have been idle
// for long enough (see counter.idleAfter): every call for the counters
// that hold leases, every idleSweeps-th for all of them.
func (s *Store) sweep(now int64) {
	s.sweeps++
	all := s.sweeps%idleSweeps == 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		visit := sh.leased
		if all {
			visit = sh.m
		}
		for _, c := range visit {
			c.expire(s, now)
			if now-c.used >= c.idleAfter(s) && c.renewing == nil && !c.queued {
				c.forgo(s, now)
				s.remove(sh, c)
			} else if c.room() == 0 {
				delete(sh.leased, c.key)
			}
		}
		sh.mu.Unlock()
	}
}
