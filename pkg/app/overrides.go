package app

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tollgatehq/tollgate/pkg/fleet"
	"github.com/tollgatehq/tollgate/pkg/override"
	overrideredis "github.com/tollgatehq/tollgate/pkg/override/redis"
	"github.com/tollgatehq/tollgate/pkg/override/statefile"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// fleetTimeout bounds a publication on the fleet channel and a read of the
// overrides that an event asks for.
const fleetTimeout = 5 * time.Second

// newOverrides builds the override registry the store calls for: in
// process, persisted in --state-dir, with the memory store; in Redis,
// with changes and resets pushed to the fleet by pub/sub, with the Redis
// store. It reads the overrides once; with Redis away it starts with none
// and Run reads them when Redis answers.
func (a *App) newOverrides(ctx context.Context, meters metric.MeterProvider) error {
	s := a.settings
	opts := override.Options{
		Tree:            a.reloader.Current,
		MaxTTL:          s.MaxOverrideTTL,
		RefreshInterval: s.OverrideRefresh,
		OnChange:        a.overridesChanged,
		Logger:          a.logger,
		MeterProvider:   meters,
	}
	if a.redisClient == nil {
		backend, err := statefile.Open(s.StateDir, statefile.Options{Logger: a.logger})
		if err != nil {
			return err
		}
		opts.Backend = backend
	} else {
		backend, err := overrideredis.New(overrideredis.Options{Client: a.redisClient, KeyPrefix: s.RedisKeyPrefix})
		if err != nil {
			return err
		}
		opts.Backend = backend
		if a.fleet, err = fleet.New(fleet.Options{Client: a.redisClient, Channel: s.RedisKeyPrefix + ".fleet", Logger: a.logger}); err != nil {
			return err
		}
		opts.Publish = func(ctx context.Context) error {
			return a.fleet.Publish(ctx, fleet.Event{Overrides: true})
		}
	}
	var err error
	if a.overrides, err = override.NewRegistry(opts); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, fleetTimeout)
	defer cancel()
	if err := a.overrides.Refresh(rctx); err != nil {
		a.logger.Warn("reading overrides at start; retrying in the background", "error", err)
	}
	return nil
}

// runOverrides starts the goroutines of the overrides: the registry's
// refreshes, and with Redis the fleet channel's listener.
func (a *App) runOverrides(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() { a.overrides.Run(ctx) })
	if a.fleet != nil {
		wg.Go(func() { a.fleet.Run(ctx, a.fleetEvent) })
	}
}

// fleetEvent applies a change another instance made: it reads the
// overrides again, or forgets what this instance holds of reset counters.
func (a *App) fleetEvent(ctx context.Context, e fleet.Event) {
	if e.Overrides || e.Resync {
		rctx, cancel := context.WithTimeout(ctx, fleetTimeout)
		if err := a.overrides.Refresh(rctx); err != nil {
			a.logger.Warn("reading overrides after a change elsewhere; retrying at the next refresh", "error", err)
		}
		cancel()
	}
	if len(e.Reset) > 0 {
		if a.overlimit != nil {
			a.overlimit.Forget(e.Reset)
		}
		if a.cached != nil {
			a.cached.Forget(e.Reset)
		}
	}
}

// publishReset is the limiter's OnReset: it tells the other instances of
// the fleet to forget what they hold of the counters.
func (a *App) publishReset(ctx context.Context, counters []store.Hit) {
	if a.fleet == nil {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fleetTimeout)
	defer cancel()
	ids := make([]store.Counter, len(counters))
	for i := range counters {
		ids[i] = counters[i].Counter()
	}
	if err := a.fleet.Publish(pctx, fleet.Event{Reset: ids}); err != nil {
		a.logger.Warn("telling other instances of a reset; their over-limit caches and leases end by themselves", "error", err)
	}
}

// overridesChanged is the registry's OnChange: the counters the changed
// overrides cover drop their leases (sized and charged under the old
// limit) and their over-limit cache entries.
func (a *App) overridesChanged(changed []override.Override) {
	covers := func(c store.Counter) bool {
		return slices.ContainsFunc(changed, func(o override.Override) bool {
			if o.Domain != c.Domain || len(o.Entries) > len(c.Entries) {
				return false
			}
			for i, e := range o.Entries {
				if c.Entries[i].Key != e.Key || c.Entries[i].Value != e.Value {
					return false
				}
			}
			return true
		})
	}
	if a.overlimit != nil {
		a.overlimit.Drop(covers)
	}
	if a.cached != nil {
		if n := a.cached.Drop(covers); n > 0 {
			a.logger.Info("overrides changed: leases of the counters they cover returned", "counters", n)
		}
	}
}

// writeOverrides writes the live overrides for /debug/config.
func (a *App) writeOverrides(w io.Writer) {
	now := time.Now()
	var live []override.Override
	for _, o := range a.overrides.Current().All() {
		if now.Before(o.ExpiresAt) {
			live = append(live, o)
		}
	}
	fmt.Fprintf(w, "\n# overrides: %d live\n", len(live))
	for _, o := range live {
		what := fmt.Sprintf("multiplier %v", o.Multiplier)
		if o.Limit != nil {
			what = fmt.Sprintf("limit %d per %s", o.Limit.RequestsPerUnit, o.Limit.Unit)
		}
		var entries []any
		for _, e := range o.Entries {
			entries = append(entries, e.Key+"="+e.Value)
		}
		fmt.Fprintf(w, "override %s: domain %s, entries %v, %s, until %s, by %q, reason %q\n",
			o.ID, o.Domain, entries, what, o.ExpiresAt.Format(time.RFC3339), o.CreatedBy, o.Reason)
	}
}
