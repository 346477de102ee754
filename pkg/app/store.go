package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/fleet"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/breaker"
	"github.com/tollgatehq/tollgate/pkg/store/cached"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/store/overlimit"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// storeChain is the counter store the settings choose, built once by
// newStoreChain: the memory store, or for Redis
//
//	cached → overlimit → breaker → redis
//
// where the cached store leases through the breaker and the over-limit
// cache is there when --over-limit-cache-bytes sizes it. It is the one
// value the rest of the app asks about the store: whether it is shared
// (Remote), whether it is degraded, what the instance holds of counters
// besides it (fleet.Local: forget, drop, reset), the leaser, and closing.
// Clearing counters (an admin reset) goes through Store, which the limiter
// decides with.
type storeChain struct {
	// top is the front of the chain.
	top store.Store

	// The layers of the Redis chain; all nil with the memory store but
	// overlimit, which is nil also without an over-limit cache.
	client    goredis.UniversalClient
	redis     *redis.Store
	breaker   *breaker.Store
	overlimit *overlimit.Store
	cached    *cached.Store

	// closers release what the chain acquired, last acquired first.
	closers []func() error
}

var _ fleet.Local = (*storeChain)(nil)

// newStoreChain builds the store the settings choose; the one switch over
// backends. onBreaker, if not nil, hears every change of the Redis
// breaker's state.
func newStoreChain(s Settings, logger *slog.Logger, meters metric.MeterProvider, onBreaker func(breaker.State)) (*storeChain, error) {
	c := &storeChain{}
	switch s.Store {
	case "memory":
		c.top = memory.New(memory.Options{MaxKeys: s.Limits.MemoryMaxKeys})
		return c, nil
	case "redis":
		if err := c.buildRedis(s, logger, meters, onBreaker); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	return nil, fmt.Errorf("unknown store %q", s.Store)
}

func (c *storeChain) buildRedis(s Settings, logger *slog.Logger, meters metric.MeterProvider, onBreaker func(breaker.State)) error {
	cfg, err := s.Redis.clientConfig()
	if err != nil {
		return err
	}
	client, err := redis.NewClient(cfg)
	if err != nil {
		return fmt.Errorf("creating the redis client: %w", err)
	}
	c.closers = append(c.closers, client.Close)
	c.client = client
	if c.redis, err = redis.New(redis.Options{
		Client:        client,
		KeyPrefix:     s.Redis.KeyPrefix,
		BatchWindow:   s.Redis.BatchWindow,
		Logger:        logger,
		MeterProvider: meters,
	}); err != nil {
		return fmt.Errorf("creating the redis store: %w", err)
	}
	c.closers = append(c.closers, c.redis.Close)
	if c.breaker, err = breaker.New(c.redis, breaker.Options{
		Name:          "redis",
		Failures:      uint32(s.Failure.BreakerFailures),
		OpenFor:       s.Failure.BreakerOpenTime,
		Probes:        uint32(s.Failure.BreakerProbes),
		OnChange:      onBreaker,
		Logger:        logger,
		MeterProvider: meters,
	}); err != nil {
		return err
	}
	logger.Info("counting in redis", "redis", cfg)
	var inner store.Store = c.breaker
	if s.Redis.OverLimitCacheBytes != 0 {
		// Above the breaker, so that counters known to be over their
		// limit are still answered while Redis is away.
		if c.overlimit, err = overlimit.New(c.breaker, overlimit.Options{MaxBytes: s.Redis.OverLimitCacheBytes, MeterProvider: meters}); err != nil {
			return err
		}
		inner = c.overlimit
	}
	// In front of everything: hits of strict limits pass through to the
	// chain, while leases bypass the over-limit cache (the cached store
	// keeps its own) but go through the breaker, so that Redis failing
	// while leases renew opens it too. Built whatever --precision says,
	// since a reload may ask for cached.
	c.cached = cached.New(cached.Options{
		Inner:         inner,
		Leaser:        c.breaker,
		RenewInterval: s.Leases.Interval,
		Lifetime:      s.Leases.Lifetime,
		MaxLifetime:   s.Leases.MaxLifetime,
		MeterProvider: meters,
		Logger:        logger,
	})
	// Closed before the Redis store: the unspent hits of every lease go
	// back while Redis is there.
	c.closers = append(c.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := c.cached.Close(ctx); err != nil {
			return fmt.Errorf("returning leases: %w", err)
		}
		return nil
	})
	c.top = c.cached
	return nil
}

// Store returns the front of the chain, which decides hits and clears
// counters (store.Clearer).
func (c *storeChain) Store() store.Store { return c.top }

// Remote reports whether the store is shared by a fleet (Redis): only such
// a store waits, fails, needs a fallback and carries fleet events.
func (c *storeChain) Remote() bool { return c.breaker != nil }

// Leaser returns what leases hits from the shared store (the breaker in
// front of Redis), or nil with the memory store, which leases nothing.
func (c *storeChain) Leaser() cached.Leaser {
	if c.breaker == nil {
		return nil
	}
	return c.breaker
}

// Degraded returns why decisions are made without the store, or "".
func (c *storeChain) Degraded() string {
	if c.breaker == nil {
		return ""
	}
	if st := c.breaker.State(); st != breaker.Closed {
		why := "store unavailable"
		if err := c.redis.ServerError(); err != nil {
			why = err.Error()
		}
		return why + ", circuit breaker " + st.String() + "; answering by failure modes"
	}
	return ""
}

// Forget forgets what the instance holds of counters another instance
// reset: their over-limit cache entries and leases.
func (c *storeChain) Forget(counters []store.Counter) {
	if c.overlimit != nil {
		c.overlimit.Forget(counters)
	}
	if c.cached != nil {
		c.cached.Forget(counters)
	}
}

// Drop ends what the instance holds of the counters match reports true
// for, as an override changed their limits, and returns how many gave back
// leases.
func (c *storeChain) Drop(match func(store.Counter) bool) int {
	if c.overlimit != nil {
		c.overlimit.Drop(match)
	}
	if c.cached == nil {
		return 0
	}
	return c.cached.Drop(match)
}

// Reset ends every lease, as the rules changed, and returns how many
// counters gave theirs back. The over-limit cache needs nothing: an entry
// whose limit changed misses and is dropped on its counter's next hit.
func (c *storeChain) Reset() int {
	if c.cached == nil {
		return 0
	}
	return c.cached.Reset()
}

// probe asks the store for a decision every interval while its breaker is
// not closed, waiting at most timeout each time, until ctx ends. Without
// it an open breaker closes only through traffic, which an instance that
// health checks took out of rotation (--breaker-not-serving) never gets
// back. It returns at once with the memory store.
func (c *storeChain) probe(ctx context.Context, interval, timeout time.Duration) {
	if c.breaker == nil {
		return
	}
	// A check (cost 0) of a counter no rule uses: it writes nothing.
	hits := []store.Hit{{
		Domain:  "tollgate.probe",
		Entries: []store.Entry{{Key: "probe", Value: "probe"}},
		Shard:   "probe",
		Limit:   algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 1, Period: time.Second.Microseconds()},
	}}
	verdicts := make([]algorithm.Verdict, len(hits))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if c.breaker.State() == breaker.Closed {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		_ = c.breaker.Apply(pctx, hits, verdicts) // the breaker records the outcome
		cancel()
	}
}

// Close releases what the chain acquired, last acquired first: the leases
// go back while Redis is there, then the store and its client close. It
// returns every failure.
func (c *storeChain) Close() []error {
	var errs []error
	for i := len(c.closers) - 1; i >= 0; i-- {
		if err := c.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	c.closers = nil
	return errs
}
