package app

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tollgatehq/tollgate/pkg/audit"
	"github.com/tollgatehq/tollgate/pkg/fleet"
	"github.com/tollgatehq/tollgate/pkg/override"
	overrideredis "github.com/tollgatehq/tollgate/pkg/override/redis"
	"github.com/tollgatehq/tollgate/pkg/override/statefile"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// fleetTimeout bounds the first read of the overrides, as package fleet
// bounds the reads its events ask for.
const fleetTimeout = 5 * time.Second

// newOverrides builds the override registry the store calls for: in
// process, persisted in --state-dir, with the memory store; in Redis,
// with changes and resets pushed to the fleet by pub/sub, with the Redis
// store, both signed with --fleet-hmac-key-file. It builds the fleet's
// event handler, which forgets local state when rules, overrides or
// counters change. It reads the overrides once; with Redis away it starts
// with none and Run reads them when Redis answers.
func (a *App) newOverrides(ctx context.Context, meters metric.MeterProvider) error {
	s := a.settings
	opts := override.Options{
		Tree:            a.reloader.Current,
		MaxTTL:          s.Overrides.MaxTTL,
		RefreshInterval: s.Overrides.Refresh,
		OnChange:        a.overridesChanged,
		OnLearned:       a.auditLearned,
		Logger:          a.logger,
		MeterProvider:   meters,
		Values:          s.Values.view(),
	}
	key, err := s.Fleet.key()
	if err != nil {
		return err
	}
	if !a.store.Remote() {
		if key != nil {
			a.logger.Info("--fleet-hmac-key-file has no effect with the memory store: nothing is shared through redis")
		}
		backend, err := statefile.Open(s.Overrides.StateDir, statefile.Options{Logger: a.logger})
		if err != nil {
			return err
		}
		opts.Backend = backend
	} else {
		if key != nil {
			a.logger.Info("overrides and fleet events are signed; unsigned ones are refused", "key_file", s.Fleet.HMACKeyFile)
		}
		backend, err := overrideredis.New(overrideredis.Options{Client: a.store.client, KeyPrefix: s.Redis.KeyPrefix, Key: key,
			Logger: a.logger, MeterProvider: meters})
		if err != nil {
			return err
		}
		opts.Backend = backend
		if a.fleet, err = fleet.New(fleet.Options{Client: a.store.client, Channel: s.Redis.KeyPrefix + ".fleet", Key: key,
			Logger: a.logger, MeterProvider: meters}); err != nil {
			return err
		}
		opts.Publish = func(ctx context.Context) error {
			return a.fleet.Publish(ctx, fleet.Event{Overrides: true})
		}
	}
	if a.overrides, err = override.NewRegistry(opts); err != nil {
		return err
	}
	if a.events, err = fleet.NewHandler(fleet.HandlerOptions{Bus: a.fleet, Overrides: a.overrides, Local: a.store, Logger: a.logger}); err != nil {
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
	wg.Go(func() { a.events.Run(ctx) }) // returns at once without Redis
}

// overridesChanged is the registry's OnChange: the fleet's handler drops
// what this instance holds of the counters the changed overrides cover,
// and a recording that is on records the change.
func (a *App) overridesChanged(changed []override.Override) {
	prefixes := make([]fleet.Prefix, len(changed))
	for i, o := range changed {
		entries := make([]store.Entry, len(o.Entries))
		for j, e := range o.Entries {
			entries[j] = store.Entry{Key: e.Key, Value: e.Value}
		}
		prefixes[i] = fleet.Prefix{Domain: o.Domain, Entries: entries}
	}
	a.events.OverridesChanged(prefixes)
	a.recordOverrides(changed)
}

// writeOverrides writes the live overrides for /debug/config, their
// values as --descriptor-values says.
func (a *App) writeOverrides(w io.Writer) {
	now, values := time.Now(), a.settings.Values.view()
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
			entries = append(entries, e.Key+"="+values.Show(e.Value))
		}
		fmt.Fprintf(w, "override %s: domain %s, entries %v, %s, until %s, by %q, reason %q\n",
			o.ID, o.Domain, entries, what, o.ExpiresAt.Format(time.RFC3339), o.CreatedBy, o.Reason)
	}
}

// auditLearned records an override that appeared in the store without
// this instance's admin API: another instance's, or one written to Redis
// directly, which only whoever can write there could do. Its values show
// as --descriptor-values says.
func (a *App) auditLearned(ctx context.Context, o override.Override) {
	o.Entries = a.settings.Values.view().ShowEntries(o.Entries)
	a.audit.Record(ctx, audit.Entry{
		Actor: "store", Action: audit.ActionOverrideLearn, Target: o.ID, After: o, Reason: o.Reason,
	})
}
