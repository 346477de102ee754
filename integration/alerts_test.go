package integration

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
)

// alertsFile holds tollgate's Prometheus alerting rules.
const alertsFile = "../envoy/observability/alerts.yaml"

// runbooks is where each alert's runbook_url points.
const runbooks = "../docs/runbooks.md"

// TestAlertRules parses tollgate's alerting rules with Prometheus's own
// rule parser (rulefmt: the fields, the durations, the PromQL, the
// templates), checks each alert's severity, annotations and runbook
// section, and runs tollgate through rejections and then with its Redis
// down until every series a rule selects is exported.
func TestAlertRules(t *testing.T) {
	groups, errs := rulefmt.ParseFile(alertsFile, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", alertsFile, errors.Join(errs...))
	}
	book, err := os.ReadFile(runbooks)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for line := range strings.Lines(string(book)) {
		if title, ok := strings.CutPrefix(strings.TrimSpace(line), "## "); ok {
			sections[strings.ToLower(title)] = true
		}
	}

	srv := redistest.StartStandalone(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "api.yaml"), searchRules)
	svc := startServiceIn(t, dir, func(s *app.Settings) {
		s.Store, s.Redis.Addrs, s.Failure.BreakerFailures = "redis", []string{srv.Addr}, 1
	})
	search := entries("api_key", "k1", "endpoint", "/search")
	for range 4 { // OK three times, then OVER_LIMIT
		svc.query(t, "api", search)
	}
	srv.Kill()
	polltest.EventuallyEvery(t, 10*time.Second, pollEvery, func() bool {
		svc.query(t, "api", search)
		m := svc.get(t, svc.httpAddr, "/metrics")
		return strings.Contains(m, `result="degraded"`) && strings.Contains(m, `tollgate_breaker_state{breaker="redis"} 2`)
	}, "tollgate to decide without Redis, its breaker open")
	exported := exportedSeries(t, svc.get(t, svc.httpAddr, "/metrics"))

	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			where := fmt.Sprintf("%s: alert %q", alertsFile, r.Alert)
			if r.Alert == "" || alerts[r.Alert] {
				t.Errorf("%s: want an alert with a name of its own", where)
			}
			alerts[r.Alert] = true
			if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", where, sev)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s", where, a)
				}
			}
			if _, anchor, _ := strings.Cut(r.Annotations["runbook_url"], "docs/runbooks.md#"); !sections[anchor] || anchor != strings.ToLower(r.Alert) {
				t.Errorf("%s: runbook_url %q is not the section ## %s of %s", where, r.Annotations["runbook_url"], r.Alert, runbooks)
			}
			sels, err := selectors(r.Expr)
			if err != nil || len(sels) == 0 {
				t.Errorf("%s: %q: %v, or it selects nothing", where, r.Expr, err)
			}
			for _, vs := range sels {
				if !selects(vs, exported[vs.Name]) {
					t.Errorf("%s: %s selects no series tollgate exports", where, vs)
				}
			}
		}
	}
	if t.Failed() {
		t.Logf("tollgate exports: %s", strings.Join(slices.Sorted(maps.Keys(exported)), " "))
	}
	for _, want := range []string{
		"TollgateRuleRejecting", "TollgateHotKey", "TollgateDecidingWithoutRedis", "TollgateRedisBreakerOpen",
		"TollgateStoreErrors", "TollgateReloadFailing", "TollgateSlowDecisions",
	} {
		if !alerts[want] {
			t.Errorf("%s: no alert %s", alertsFile, want)
		}
	}
}
