package integration

import (
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
)

// promqlWords are the PromQL words that look like metric names but are
// not: keywords, aggregation modifiers and the like. Function names need
// no list: a name followed by "(" is a call.
var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
	"inf": true, "nan": true,
}

var (
	// promqlStrings matches string literals.
	promqlStrings = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	// promqlBraces matches label matchers and range or subquery brackets.
	promqlBraces = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	// promqlGrouping matches the label lists of by, without, on, ignoring
	// and group_left/right.
	promqlGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// promqlIdent matches an identifier and what follows it.
	promqlIdent = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
	// promqlNumber matches numbers, durations included, so that their
	// letters (1e-3, 5m) are not taken for names.
	promqlNumber = regexp.MustCompile(`\b\d[0-9a-zA-Z.]*`)
)

// metricNames returns the metric names a PromQL expression selects.
func metricNames(expr string) []string {
	expr = promqlStrings.ReplaceAllString(expr, " ")
	expr = promqlBraces.ReplaceAllString(expr, " ")
	expr = promqlGrouping.ReplaceAllString(expr, " ")
	expr = promqlNumber.ReplaceAllString(expr, " ")
	var names []string
	for _, m := range promqlIdent.FindAllString(expr, -1) {
		if strings.HasSuffix(m, "(") {
			continue // a function call or an aggregation
		}
		if name := strings.TrimSpace(m); !promqlWords[name] && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`sum by (result) (rate(tollgate_decisions_total[$__rate_interval]))`, []string{"tollgate_decisions_total"}},
		{`sum by (domain, rule) (rate(tollgate_decisions_total{result=~"over_limit|denylist"}[5m]))`, []string{"tollgate_decisions_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(a_bucket[1m])))`, []string{"a_bucket"}},
		{`sum(rate(a_sum[1m])) / sum(rate(a_count[1m]))`, []string{"a_sum", "a_count"}},
		{`time() - min(b)`, []string{"b"}},
		{`count(count by (hash) (c))`, []string{"c"}},
		{`max by (instance, breaker) (d) > bool 1e-3`, []string{"d"}},
		{`e offset 5m and on (job) f`, []string{"e", "f"}},
		{`g * on (x) group_left (y) h`, []string{"g", "h"}},
	}
	for _, tt := range tests {
		if got := metricNames(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}

// seriesNames returns the metric names of the series in a Prometheus text
// exposition: histograms appear as their _bucket, _sum and _count.
func seriesNames(exposition string) map[string]bool {
	names := map[string]bool{}
	for line := range strings.Lines(exposition) {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

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
	exported := seriesNames(svc.get(t, svc.httpAddr, "/metrics"))

	d := loadDashboard(t)
	used := map[string]bool{}
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			names := metricNames(q.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no metric", p.Title, q.Expr)
			}
			for _, name := range names {
				used[name] = true
				if !exported[name] {
					t.Errorf("panel %q: query %q names %s, which tollgate does not export", p.Title, q.Expr, name)
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
	} {
		if !used[want] {
			t.Errorf("no dashboard query uses %s", want)
		}
	}
}
