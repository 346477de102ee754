package integration

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
)

// TestDashboardQueriesExportedMetrics runs tollgate on a real Redis, makes
// every kind of event the dashboard shows happen (decisions of several
// results, a reload, store errors and an open breaker), scrapes /metrics
// and requires every metric that a dashboard query names to be there.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	srv := redistest.StartStandalone(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "api.yaml"), searchRules)
	svc := startServiceIn(t, dir, func(s *app.Settings) {
		s.Store, s.Redis.Addrs, s.Failure.BreakerFailures = "redis", []string{srv.Addr}, 1
	})

	// OK three times, then OVER_LIMIT.
	search := entries("api_key", "k1", "endpoint", "/search")
	for range 4 {
		svc.query(t, "api", search)
	}
	// A reload.
	before, _, _ := strings.Cut(svc.get(t, svc.debugAddr, "/debug/config"), "\n")
	writeFile(t, filepath.Join(dir, "more.yaml"), "domain: more\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	polltest.EventuallyEvery(t, 10*time.Second, pollEvery, func() bool {
		now, _, _ := strings.Cut(svc.get(t, svc.debugAddr, "/debug/config"), "\n")
		return now != before && strings.Contains(svc.get(t, svc.httpAddr, "/metrics"), `tollgate_config_reloads_total{`)
	}, "the reload to be counted")
	// Redis gone: store errors, and the breaker opens.
	srv.Kill()
	polltest.EventuallyEvery(t, 10*time.Second, pollEvery, func() bool {
		svc.query(t, "api", search)
		return strings.Contains(svc.get(t, svc.httpAddr, "/metrics"), `tollgate_breaker_state{breaker="redis"`) &&
			strings.Contains(svc.get(t, svc.httpAddr, "/metrics"), `tollgate_breaker_changes_total{`)
	}, "the breaker to open")
	exported := exportedSeries(t, svc.get(t, svc.httpAddr, "/metrics"))

	d := loadDashboard(t)
	used := map[string]bool{}
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			sels, err := selectors(q.Expr)
			if err != nil || len(sels) == 0 {
				t.Errorf("panel %q: query %q: %v, or it names no metric", p.Title, q.Expr, err)
			}
			for _, vs := range sels {
				used[vs.Name] = true
				if _, ok := exported[vs.Name]; !ok {
					t.Errorf("panel %q: query %q names %s, which tollgate does not export", p.Title, q.Expr, vs.Name)
				}
			}
		}
	}
	if t.Failed() {
		t.Logf("tollgate exports: %s", strings.Join(slices.Sorted(maps.Keys(exported)), " "))
	}
	// The dashboard shows what the issue asks of it.
	for _, want := range []string{
		"tollgate_decisions_total",               // decisions by result and rule
		"tollgate_check_duration_seconds_bucket", // latency
		"tollgate_store_errors_total",            // store errors
		"tollgate_breaker_state",                 // breaker state
		"tollgate_config_reloads_total",          // reloads
		"tollgate_rule_hottest_ratio",            // who is limited
	} {
		if !used[want] {
			t.Errorf("no dashboard query uses %s", want)
		}
	}
}
