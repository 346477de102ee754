package app

import (
	"context"

	"github.com/tollgatehq/tollgate/pkg/admin"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/reload"
	"github.com/tollgatehq/tollgate/pkg/shadow"
	"github.com/tollgatehq/tollgate/pkg/top"
)

// newShadow builds the shadow rule set when --shadow-config-dir is set:
// its reloader, loading the directory with the live rules' settings (a
// broken directory, even at the start, leaves the shadow set without
// new rules and the live ones untouched), the Set that decides the live
// calls again with the policy of engine, the live engine's options, and
// its top clients while the live ones are kept. It needs the overrides
// and the top clients built.
func (a *App) newShadow(engine limiter.Options) error {
	dir := a.settings.Shadow.ConfigDir
	if dir == "" {
		return nil
	}
	rules, err := newRuleSet(a.settings, reload.Options{Dir: dir, Set: "shadow", StartBroken: true,
		Logger: a.logger, MeterProvider: a.telemetry.MeterProvider()})
	if err != nil {
		return err
	}
	if a.top != nil {
		if a.shadowTop, err = top.New(top.Options{Capacity: a.settings.Top.Capacity, Instance: a.top.Instance(), Logger: a.logger}); err != nil {
			return err
		}
	}
	set, err := shadow.New(shadow.Options{
		Tree: rules.Current, Engine: engine, MaxKeys: a.settings.Limits.MemoryMaxKeys, Top: a.shadowTop,
		Logger: a.logger, MeterProvider: a.telemetry.MeterProvider(),
	})
	if err != nil {
		return err
	}
	a.shadowRules, a.shadow = rules, set
	a.logger.Info("shadow rules on: every decided call is decided again under them, its answer unchanged",
		"component", "shadow", "dir", dir, "hash", rules.Status().Hash)
	return nil
}

// runShadow watches the shadow rules and decides the queued calls until
// ctx ends. A watch that fails is logged and stops the shadow reloads,
// not the service.
func (a *App) runShadow(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.shadow.Run(ctx) // returns nil when ctx ends
	}()
	if err := a.shadowRules.Run(ctx); err != nil {
		a.logger.Error("watching the shadow rules failed; they are no longer reloaded", "component", "shadow", "error", err)
	}
	<-done
}

// recorders returns what hears every decided call: the traffic recorder
// and the shadow rule set, those that are on.
func (a *App) recorders() limiter.Recorder {
	var on []limiter.Recorder
	if a.recorder != nil {
		on = append(on, a.recorder)
	}
	if a.shadow != nil {
		on = append(on, a.shadow)
	}
	return limiter.Recorders(on...)
}

// shadowStatus is the shadow rule set's part of GET /v1/status; nil
// without it.
func (a *App) shadowStatus() *admin.ShadowStatus {
	if a.shadow == nil {
		return nil
	}
	rs, st := a.shadowRules.Status(), a.shadow.Status()
	out := &admin.ShadowStatus{
		Rules: admin.RulesStatus{Source: a.settings.Shadow.ConfigDir, Hash: rs.Hash, LoadedAt: rs.LastSuccess,
			Reloads: rs.Reloads, Failures: rs.Failures},
		Decided: st.Decided, Dropped: st.Dropped,
	}
	if rs.LastError != nil {
		out.Rules.LastError = rs.LastError.Error()
	}
	return out
}
