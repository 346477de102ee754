package app

import (
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/reload"
	"github.com/tollgatehq/tollgate/pkg/store/cached"
)

// What the external tests of package app look at inside a running App.

func (a *App) Reloader() *reload.Reloader    { return a.reloader }
func (a *App) Overrides() *override.Registry { return a.overrides }
func (a *App) Limiter() *limiter.Limiter     { return a.limiter }

// FleetListening reports whether a hears the fleet's events: always with
// the memory store, which has no fleet.
func (a *App) FleetListening() bool { return a.fleet == nil || a.fleet.Subscribed() }

// CachedLen is how many counters the cached store holds.
func (a *App) CachedLen() int { return a.store.cached.Len() }

// OverLimitLen is how many entries the over-limit cache holds.
func (a *App) OverLimitLen() int { return a.store.overlimit.Len() }

// Leaser is the store chain's leaser.
func (a *App) Leaser() cached.Leaser { return a.store.Leaser() }
