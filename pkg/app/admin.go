package app

import (
	"context"
	"io"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel/metric"

	"github.com/tollgatehq/tollgate/pkg/admin"
	"github.com/tollgatehq/tollgate/pkg/audit"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/ui"
)

// newAudit returns the audit log the settings ask for: JSON lines appended
// to --audit-log, or on stderr without it.
func (a *App) newAudit() (*audit.Log, error) {
	var w io.Writer = os.Stderr
	if path := a.settings.Admin.AuditLog; path != "" {
		f, err := audit.OpenFile(path)
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, f.Close)
		a.auditFile = f
		w = f
	}
	return audit.New(audit.Options{Logger: slog.New(slog.NewJSONHandler(w, nil))}), nil
}

// auditMetrics registers tollgate_audit_write_failures_total, the writes
// to the audit file that failed, with the audit file.
func (a *App) auditMetrics(meters metric.MeterProvider) error {
	if a.auditFile == nil {
		return nil
	}
	_, err := meters.Meter(meterName).Int64ObservableCounter("tollgate.audit.write_failures",
		metric.WithDescription("Writes to the audit log file that failed: entries lost from the file (GET /v1/audit still has them)."),
		metric.WithUnit("{write}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(a.auditFile.Failures())
			return nil
		}))
	return err
}

// newTokens returns the admin tokens the settings configure, which may be
// none.
func (a *App) newTokens() (*admin.Tokens, error) {
	return admin.NewTokens(admin.TokensOptions{
		File:   a.settings.Admin.TokenFile,
		Env:    string(a.settings.Admin.Token),
		Logger: a.logger,
	})
}

// newAdminAPI returns the admin listener's handler: the admin API and its
// status page (/ui/). It returns nil (so that no listener opens) when no
// admin token is configured. It needs the limiter and the override
// registry built.
func (a *App) newAdminAPI() (*ui.Handler, error) {
	if !a.tokens.Enabled() {
		return nil, nil
	}
	h, err := admin.New(admin.Options{
		Tokens:        a.tokens,
		Overrides:     a.overrides,
		Limiter:       a.limiter,
		Resetter:      a.limiter,
		Audit:         a.audit,
		Logger:        a.logger,
		MeterProvider: a.telemetry.MeterProvider(),
		Values:        a.settings.Values.view(),
		RuleHistory:   a.reloader.History,
		Status:        a.status,
		Top:           a.top,
		ShadowTop:     a.shadowTop,
		Recorder:      a.recorder,
	})
	if err != nil {
		return nil, err
	}
	page, err := ui.New(ui.Options{API: h})
	if err != nil {
		return nil, err
	}
	a.logger.Info("admin API on", "tls", a.settings.AdminTLS.Cert != "", "tokens", a.tokens.Names(), "status_page", ui.PagePath)
	return page, nil
}

// status answers the admin API's GET /v1/status.
func (a *App) status() admin.Status {
	rs := a.reloader.Status()
	st := admin.Status{
		Version: a.buildInfo.Version, Store: a.settings.Store, Degraded: a.degraded(),
		Rules: admin.RulesStatus{
			Source: a.reloadSource(), Hash: rs.Hash, LoadedAt: rs.LastSuccess,
			Reloads: rs.Reloads, Failures: rs.Failures,
		},
		Overrides: a.overrides.Current().Len(),
		Shadow:    a.shadowStatus(),
	}
	if rs.LastError != nil {
		st.Rules.LastError = rs.LastError.Error()
	}
	if a.store.breaker != nil {
		st.Breaker = a.store.breaker.State().String()
	}
	if a.fleet != nil {
		st.Fleet = &admin.FleetStatus{Subscribed: a.fleet.Subscribed()}
	}
	return st
}

// reloadState is the audit's account of one descriptor configuration.
type reloadState struct {
	Hash string `json:"hash"`
	// Added, Removed and Changed name the domains that differ from the
	// configuration before; they are empty in the state before a reload.
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Changed []string `json:"changed,omitempty"`
}

// auditReload records a reload that swapped in tree, and remembers tree
// for the next. The reloader calls it (through treeChanged) one call at a
// time.
func (a *App) auditReload(tree *descriptor.Tree) {
	before := a.auditedTree
	a.auditedTree = tree
	after := reloadState{Hash: tree.Hash()}
	after.Added, after.Removed, after.Changed = descriptor.DiffDomains(before, tree)
	a.audit.Record(context.Background(), audit.Entry{
		Actor: "reload", Action: audit.ActionReload, Target: a.reloadSource(),
		Before: reloadState{Hash: before.Hash()}, After: after,
	})
}

// reloadSource names where the rules come from, for the audit.
func (a *App) reloadSource() string {
	if a.settings.XDS.ConfigType == "xds" {
		return "xds"
	}
	return a.settings.ConfigDir
}
