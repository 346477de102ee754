package app_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
	"github.com/tollgatehq/tollgate/pkg/version"
)

// lintConfig allows 3 hits a minute per key k, charges 1 a minute per
// key report always, denies key blocked, and allows key big many hits a
// minute, leased where precision is cached.
const lintConfig = `domain: lint
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 3, name: per_key}
  - key: report
    rate_limit: {unit: minute, requests_per_unit: 1, charge: always, name: per_report}
  - key: blocked
    action: deny
  - key: big
    rate_limit: {unit: minute, requests_per_unit: 100000, algorithm: fixed_window, name: per_big}
`

// TestMetricsLint scrapes a running tollgate after a few decisions and
// holds every series to the Prometheus conventions that promlint checks:
// names, base units, _total on counters, help text. No problem is
// exempted. It runs on the memory store and on a real Redis, whose store
// and circuit breaker add their own series.
func TestMetricsLint(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "lint.yaml"), []byte(lintConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	var redisServer *redistest.Server
	tests := []struct {
		name  string
		tweak func(*testing.T, *app.Settings)
		// fail, if not nil, breaks the store before one more decision, so
		// that the error series appear too.
		fail func()
		// reports, if set, sends two always-charged reports of one hit to
		// a limit of one, so that the second is charged past the limit.
		reports bool
		// big is how many hits to send to key big.
		big  int
		want []string // series the scrape must hold, beyond the decisions
		// wantRE are patterns of more series the scrape must hold.
		wantRE []string
	}{
		{name: "memory", reports: true, want: []string{
			"tollgate_check_duration_seconds_count 8",
			`tollgate_charged_past_limit_hits_total{domain="lint",limit="per_report",rule="report"} 1`,
		}},
		{
			name: "redis",
			tweak: func(t *testing.T, s *app.Settings) {
				redisServer = redistest.StartStandalone(t)
				s.Store, s.Redis.Addrs, s.Failure.BreakerFailures = "redis", []string{redisServer.Addr}, 1
			},
			fail: func() { redisServer.Kill() },
			// Refused at once (redis), or not within --store-timeout on a
			// loaded machine (context).
			// The script is loaded at start, and again when a decision's
			// prepare raced the first one.
			wantRE: []string{`tollgate_redis_errors_total\{reason="(redis|context)"\} 1`, `tollgate_redis_script_loads_total [12]`},
			want: []string{
				`tollgate_decisions_total{domain="lint",limit="",result="degraded",rule="k"} 1`,
				"tollgate_check_duration_seconds_count 7",
				`tollgate_store_errors_total 1`,
				`tollgate_breaker_state{breaker="redis"} 2`,
				`tollgate_breaker_changes_total{breaker="redis",to="open"} 1`,
			},
		},
		{
			// The fourth k=a is rejected by Redis, the fifth from the cache.
			name: "redis with the over-limit cache",
			tweak: func(t *testing.T, s *app.Settings) {
				srv := redistest.StartStandalone(t)
				s.Store, s.Redis.Addrs, s.Redis.OverLimitCacheBytes = "redis", []string{srv.Addr}, 1<<20
			},
			want: []string{"tollgate_overlimit_cache_hits_total 1", "tollgate_overlimit_cache_entries 1"},
		},
		{
			// k's limit of 3 is too small to lease: its first three hits
			// are decided strictly, and the third empties the bucket, so
			// the fourth and fifth are rejected from the cached store's
			// over-limit state. big's first hit, of a counter seen once, is
			// decided strictly too; its second reserves a lease; how many of
			// the others spend one depends on the demand each lease follows.
			name: "redis with precision cached",
			tweak: func(t *testing.T, s *app.Settings) {
				srv := redistest.StartStandalone(t)
				s.Store, s.Redis.Addrs, s.Rules.Precision = "redis", []string{srv.Addr}, "cached"
			},
			big: 5,
			want: []string{
				`tollgate_decisions_total{domain="lint",limit="per_big",result="ok",rule="big"} 5`,
				`tollgate_cached_decisions_total{path="strict"} 4`,
				`tollgate_cached_decisions_total{path="over_limit"} 2`,
				`tollgate_cached_counters 2`,
				`tollgate_cached_evictions_total 0`,
			},
			wantRE: []string{
				`tollgate_cached_decisions_total\{path="renewal_wait"\} [1-4]`,
				`tollgate_cached_decisions_total\{path="local"\} [0-3]`,
				`tollgate_cached_leaser_calls_total\{op="reserve",result="ok"\} [1-5]`,
				`tollgate_cached_leased_hits_total [1-9][0-9]*`,
				`tollgate_cached_lease_size_count [1-5]`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := apptest.Start(t, dir, apptest.Options{Settings: func(s *app.Settings) {
				if tt.tweak != nil {
					tt.tweak(t, s)
				}
			}})
			client, err := rlsclient.Dial(svc.GRPCAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			decide := func(d string) {
				t.Helper()
				entries, err := rlsclient.ParseDescriptor(d)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if _, err := client.Query(ctx, rlsclient.Request{Domain: "lint", Descriptors: [][]descriptor.Entry{entries}}); err != nil {
					t.Fatalf("ShouldRateLimit %s: %v", d, err)
				}
			}
			for _, d := range []string{"k=a", "k=a", "k=a", "k=a", "k=a", "blocked=x"} {
				decide(d)
			}
			if tt.reports {
				decide("report=r")
				decide("report=r")
			}
			for range tt.big {
				decide("big=b")
			}
			if tt.fail != nil {
				tt.fail()
				decide("k=b")
			}

			body := apptest.Get(t, "http://"+svc.HTTPAddr+"/metrics")
			for _, want := range append([]string{
				`tollgate_decisions_total{domain="lint",limit="per_key",result="ok",rule="k"} 3`,
				`tollgate_decisions_total{domain="lint",limit="per_key",result="over_limit",rule="k"} 2`,
				`tollgate_decisions_total{domain="lint",limit="",result="denylist",rule="blocked"} 1`,
				"tollgate_config_last_reload_successful 1",
			}, tt.want...) {
				if !strings.Contains(body, "\n"+want+"\n") {
					t.Errorf("scrape lacks the line %s", want)
				}
			}
			for _, want := range tt.wantRE {
				if !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(body) {
					t.Errorf("scrape has no line matching %s", want)
				}
			}
			if strings.Contains(body, "otel_scope") {
				t.Error("scrape names OpenTelemetry instrumentation scopes")
			}
			problems, err := promlint.New(strings.NewReader(body)).Lint()
			if err != nil {
				t.Fatalf("linting the scrape: %v", err)
			}
			for _, p := range problems {
				t.Errorf("metric %s: %s", p.Metric, p.Text)
			}
			if t.Failed() {
				t.Logf("scrape:\n%s", body)
			}
		})
	}
}

// TestBuildInfoServed checks that /metrics and /debug/config name the
// build that `tollgate version` prints (pkg/cli's TestVersion holds the
// command to the same version.Read).
func TestBuildInfoServed(t *testing.T) {
	svc := apptest.Start(t, "../../config-examples", apptest.Options{})
	b := version.Read()
	metric := `tollgate_build_info{goversion="` + b.GoVersion + `",revision="` + b.Revision + `",version="` + b.Version + `"} 1`
	if body := apptest.Get(t, "http://"+svc.HTTPAddr+"/metrics"); !strings.Contains(body, "\n"+metric+"\n") {
		t.Errorf("/metrics lacks %s", metric)
	}
	line := "# tollgate " + b.Version + ", revision " + b.Revision + ", " + b.GoVersion + "\n"
	body := apptest.Get(t, "http://"+svc.DebugAddr+"/debug/config")
	if lines := strings.SplitAfterN(body, "\n", 3); len(lines) < 3 || !strings.HasPrefix(lines[0], "# hash ") || lines[1] != line {
		t.Errorf("/debug/config does not begin with its hash line, then %q:\n%s", line, body)
	}
}
