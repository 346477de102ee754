package app_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/override/statefile"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// overrideRules limits each tenant to 2 per hour: a window that never
// turns during a test.
const overrideRules = "domain: o\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: fixed_window, name: per_tenant}\n"

// overrideDir returns a configuration directory holding overrideRules.
func overrideDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	apptest.WriteFile(t, filepath.Join(dir, "o.yaml"), overrideRules)
	return dir
}

// dialApp returns a client of a's gRPC server, closed when the test ends.
func dialApp(t *testing.T, a *apptest.Running) *rlsclient.Client {
	t.Helper()
	grpcAddr := a.Addrs().GRPC
	client, err := rlsclient.Dial(grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// send sends client one descriptor of domain, with a deadline of 5 s, and
// returns the answer.
func send(t *testing.T, client *rlsclient.Client, domain string, entries ...descriptor.Entry) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := client.Query(ctx, rlsclient.Request{Domain: domain, Descriptors: [][]descriptor.Entry{entries}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// tenantStatus sends client tenant's descriptor of domain o and returns
// its status.
func tenantStatus(t *testing.T, client *rlsclient.Client, tenant string) *rlsv3.RateLimitResponse_DescriptorStatus {
	t.Helper()
	return send(t, client, "o", descriptor.Entry{Key: "tenant", Value: tenant}).Statuses[0]
}

// create makes an override of tenant on a, multiplying by 5, expiring
// after ttl.
func create(t *testing.T, a *apptest.Running, tenant string, ttl time.Duration) override.Override {
	t.Helper()
	o, err := a.Overrides().Create(context.Background(), override.Override{
		Domain: "o", Entries: []descriptor.Entry{{Key: "tenant", Value: tenant}}, Multiplier: 5,
		ExpiresAt: time.Now().Add(ttl), Reason: "test", CreatedBy: "tester",
	})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// limitName returns the name of a status's current limit.
func limitName(st *rlsv3.RateLimitResponse_DescriptorStatus) string {
	return st.GetCurrentLimit().GetName()
}

// TestOverridesPersistAcrossRestart checks that the memory store's
// overrides survive a restart through the state file, and show in
// /debug/config.
func TestOverridesPersistAcrossRestart(t *testing.T) {
	dir, state := overrideDir(t), t.TempDir()
	useState := func(s *app.Settings) { s.Overrides.StateDir = state }
	first := apptest.Start(t, dir, apptest.Options{Settings: useState})
	o := create(t, first, "acme", time.Hour)
	if got := limitName(tenantStatus(t, dialApp(t, first), "acme")); got != "override:"+o.ID {
		t.Fatalf("the first App reports limit %q, want override:%s", got, o.ID)
	}
	second := apptest.Start(t, dir, apptest.Options{Settings: useState})
	st := tenantStatus(t, dialApp(t, second), "acme")
	if limitName(st) != "override:"+o.ID || st.GetCurrentLimit().GetRequestsPerUnit() != 10 {
		t.Fatalf("after a restart: %v, want 10 per hour named override:%s", st, o.ID)
	}
	debugAddr := second.DebugAddr
	body := apptest.Get(t, "http://"+debugAddr+"/debug/config")
	if want := "override " + o.ID + ": domain o, entries [tenant=acme], multiplier 5"; !strings.Contains(body, want) {
		t.Errorf("/debug/config lacks %q:\n%s", want, body)
	}
}

// TestCorruptStateFile checks that a tollgate whose state file is corrupt
// starts, without overrides, says so in the log and keeps the file aside.
func TestCorruptStateFile(t *testing.T) {
	dir, state := overrideDir(t), t.TempDir()
	apptest.WriteFile(t, filepath.Join(state, statefile.FileName), "{not json")
	logs := &logtest.Buffer{}
	a := apptest.Start(t, dir, apptest.Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), Settings: func(s *app.Settings) { s.Overrides.StateDir = state }})
	if st := tenantStatus(t, dialApp(t, a), "acme"); limitName(st) != "per_tenant" {
		t.Fatalf("limit %q, want the rule's", limitName(st))
	}
	if !strings.Contains(logs.String(), "level=ERROR msg=\"override state file is corrupt; moved aside, starting with no overrides\"") {
		t.Errorf("the log lacks the corrupt state file:\n%s", logs)
	}
	if aside, _ := filepath.Glob(filepath.Join(state, statefile.FileName+".corrupt-*")); len(aside) != 1 {
		t.Errorf("files set aside: %v, want one", aside)
	}
	create(t, a, "acme", time.Hour) // and the registry works
}

func TestOverridesFleetStandalone(t *testing.T) {
	srv := redistest.StartStandalone(t)
	testOverridesFleet(t, "single", []string{srv.Addr})
}

func TestOverridesFleetCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	testOverridesFleet(t, "cluster", c.Addrs())
}

// TestOverridesFleetSigned runs testOverridesFleet with both instances
// signing with one key (--fleet-hmac-key-file): they still exchange
// overrides and resets.
func TestOverridesFleetSigned(t *testing.T) {
	srv := redistest.StartStandalone(t)
	testOverridesFleet(t, "single", []string{srv.Addr}, withKey(fleetKey))
}

// The keys of the signed fleets' tests: 32 bytes each.
const (
	fleetKey = "fleet-key-0123456789abcdef012345"
	otherKey = "other-key-0123456789abcdef012345"
)

// withKey returns a settings tweak that signs with key.
func withKey(key string) func(*app.Settings) {
	return func(s *app.Settings) { s.Fleet.HMACKey = app.Secret(key) }
}

// testOverridesFleet runs two instances on one Redis: an override made on
// one applies on the other within a second and goes at its expiry; a
// reset on one lets a client that the other rejects from its over-limit
// cache through within a second. tweaks change both instances' settings.
func testOverridesFleet(t *testing.T, redisType string, addrs []string, tweaks ...func(*app.Settings)) {
	dir := overrideDir(t)
	useRedis := func(s *app.Settings) {
		s.Store, s.Redis.Type, s.Redis.Addrs, s.Redis.KeyPrefix = "redis", redisType, addrs, "of"
		s.Redis.Timeout, s.Failure.StoreTimeout = time.Second, 5*time.Second
		s.Redis.OverLimitCacheBytes = 1 << 20
		// Longer than any test: only pub/sub can bring a change in time.
		s.Overrides.Refresh = time.Hour
		for _, tweak := range tweaks {
			tweak(s)
		}
	}
	a := apptest.Start(t, dir, apptest.Options{Settings: useRedis})
	b := apptest.Start(t, dir, apptest.Options{Settings: useRedis})
	ca, cb := dialApp(t, a), dialApp(t, b)
	// Both listen once they have read the overrides after subscribing.
	for _, x := range []*apptest.Running{a, b} {
		polltest.Eventually(t, 5*time.Second, func() bool { return x.FleetListening() }, "the fleet channel is not subscribed")
	}

	t.Run("override", func(t *testing.T) {
		o := create(t, a, "acme", time.Hour)
		polltest.Eventually(t, time.Second, func() bool { return limitName(tenantStatus(t, cb, "acme")) == "override:"+o.ID },
			"the other instance does not apply override %s", o.ID)
		// Audited after the snapshot that applies it is stored.
		learned := `"actor":"store","action":"override.learn","target":"` + o.ID + `"`
		polltest.Eventually(t, time.Second, func() bool {
			audited, err := os.ReadFile(b.AuditFile)
			return err == nil && strings.Contains(string(audited), learned)
		}, "the other instance does not audit the override it learned: no %s", learned)
		if _, err := b.Overrides().Delete(context.Background(), o.ID); err != nil {
			t.Fatal(err)
		}
		polltest.Eventually(t, time.Second, func() bool { return limitName(tenantStatus(t, ca, "acme")) == "per_tenant" },
			"the first instance still applies the deleted override")
	})

	t.Run("expiry", func(t *testing.T) {
		o := create(t, a, "brief", 1500*time.Millisecond)
		polltest.Eventually(t, time.Second, func() bool { return limitName(tenantStatus(t, cb, "brief")) == "override:"+o.ID },
			"the other instance does not apply override %s", o.ID)
		polltest.Eventually(t, time.Until(o.ExpiresAt)+time.Second, func() bool { return time.Now().After(o.ExpiresAt) }, "time stands still")
		for name, c := range map[string]*rlsclient.Client{"first": ca, "second": cb} {
			if got := limitName(tenantStatus(t, c, "brief")); got != "per_tenant" {
				t.Errorf("the %s instance applies %q after its expiry", name, got)
			}
		}
	})

	t.Run("reset", func(t *testing.T) {
		for range 2 {
			if st := tenantStatus(t, cb, "rejected"); st.Code != rlsv3.RateLimitResponse_OK {
				t.Fatalf("within the limit: %v", st)
			}
		}
		for range 2 {
			if st := tenantStatus(t, cb, "rejected"); st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("over the limit: %v", st)
			}
		}
		// The earlier subtests may have left counters there too.
		held := b.OverLimitLen()
		if held == 0 {
			t.Fatal("the over-limit cache holds nothing")
		}
		got, err := a.Limiter().Reset(context.Background(), &limiter.Request{Domain: "o",
			Descriptors: []limiter.Descriptor{{Entries: []descriptor.Entry{{Key: "tenant", Value: "rejected"}}}}})
		if err != nil || len(got) != 1 {
			t.Fatalf("Reset = %+v, %v", got, err)
		}
		polltest.Eventually(t, time.Second, func() bool { return b.OverLimitLen() == held-1 },
			"the other instance's over-limit cache keeps the reset counter")
		if st := tenantStatus(t, cb, "rejected"); st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 1 {
			t.Fatalf("after the reset: %v, want OK with 1 left", st)
		}
	})
}

// TestOverrideReturnsLeases checks that an override makes the cached
// store give back the leases of the counters it covers, which were sized
// and charged under the old limit, and keeps the others.
func TestOverrideReturnsLeases(t *testing.T) {
	srv := redistest.StartStandalone(t)
	dir := t.TempDir()
	apptest.WriteFile(t, filepath.Join(dir, "p.yaml"), cachedRule)
	a := apptest.Start(t, dir, apptest.Options{Settings: func(s *app.Settings) { s.Store, s.Redis.Addrs = "redis", []string{srv.Addr} }})
	client := dialApp(t, a)
	for _, v := range []string{"covered", "other"} {
		send(t, client, "p", descriptor.Entry{Key: "k", Value: v})
	}
	if n := a.CachedLen(); n != 2 {
		t.Fatalf("the cached store holds %d counters, want 2", n)
	}
	if _, err := a.Overrides().Create(context.Background(), override.Override{Domain: "p", Entries: []descriptor.Entry{{Key: "k", Value: "covered"}},
		Multiplier: 2, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if n := a.CachedLen(); n != 1 {
		t.Fatalf("after the override the cached store holds %d counters, want 1", n)
	}
}

// resetRules limits each algorithm, strict and cached, to 3 per hour.
const resetRules = `domain: r
descriptors:
  - {key: alg, value: token_bucket, rate_limit: {unit: hour, requests_per_unit: 3, algorithm: token_bucket}}
  - {key: alg, value: fixed_window, rate_limit: {unit: hour, requests_per_unit: 3, algorithm: fixed_window}}
  - {key: alg, value: sliding_window_counter, rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding_window_counter}}
  - {key: alg, value: sliding_window_log, rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding_window_log}}
  - {key: cached, value: token_bucket, rate_limit: {unit: hour, requests_per_unit: 3, algorithm: token_bucket, precision: cached}}
  - {key: cached, value: fixed_window, rate_limit: {unit: hour, requests_per_unit: 3, algorithm: fixed_window, precision: cached}}
  - {key: cached, value: sliding_window_counter, rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding_window_counter, precision: cached}}
`

// TestResetThroughTheChain resets exhausted clients of every algorithm
// through the whole Redis chain (cached store, over-limit cache, breaker,
// Redis), standalone and Cluster: each is admitted again at once.
func TestResetThroughTheChain(t *testing.T) {
	deployments := []struct {
		name  string
		redis func(t *testing.T) (string, []string)
	}{
		{"standalone", func(t *testing.T) (string, []string) { return "single", []string{redistest.StartStandalone(t).Addr} }},
		{"cluster", func(t *testing.T) (string, []string) { return "cluster", redistest.StartCluster(t).Addrs() }},
	}
	for _, d := range deployments {
		t.Run(d.name, func(t *testing.T) {
			redisType, addrs := d.redis(t)
			dir := t.TempDir()
			apptest.WriteFile(t, filepath.Join(dir, "r.yaml"), resetRules)
			a := apptest.Start(t, dir, apptest.Options{Settings: func(s *app.Settings) {
				s.Store, s.Redis.Type, s.Redis.Addrs = "redis", redisType, addrs
				s.Redis.Timeout, s.Failure.StoreTimeout = time.Second, 5*time.Second
				s.Redis.OverLimitCacheBytes = 1 << 20
			}})
			client := dialApp(t, a)
			for _, key := range []string{"alg", "cached"} {
				for _, alg := range []string{"token_bucket", "fixed_window", "sliding_window_counter", "sliding_window_log"} {
					if key == "cached" && alg == "sliding_window_log" {
						continue
					}
					entries := []descriptor.Entry{{Key: key, Value: alg}}
					query := func() rlsv3.RateLimitResponse_Code {
						t.Helper()
						return send(t, client, "r", entries...).OverallCode
					}
					for i := range 3 {
						if code := query(); code != rlsv3.RateLimitResponse_OK {
							t.Fatalf("%s=%s hit %d: %v", key, alg, i, code)
						}
					}
					for range 2 { // the second from the over-limit cache
						if code := query(); code != rlsv3.RateLimitResponse_OVER_LIMIT {
							t.Fatalf("%s=%s over the limit: %v", key, alg, code)
						}
					}
					got, err := a.Limiter().Reset(context.Background(), &limiter.Request{Domain: "r", Descriptors: []limiter.Descriptor{{Entries: entries}}})
					if err != nil || len(got) != 1 {
						t.Fatalf("%s=%s: Reset = %+v, %v", key, alg, got, err)
					}
					for i := range 3 {
						if code := query(); code != rlsv3.RateLimitResponse_OK {
							t.Fatalf("%s=%s hit %d after the reset: %v", key, alg, i, code)
						}
					}
					// Exactly the limit again: nothing left of the old
					// counter. (So small a limit leases nothing: the cached
					// store's own tests check that a cleared lease is not
					// given back.)
					if code := query(); code != rlsv3.RateLimitResponse_OVER_LIMIT {
						t.Fatalf("%s=%s over the limit after the reset: %v", key, alg, code)
					}
				}
			}
		})
	}
}

// TestSignedFleetRefuses runs, on one Redis, two instances with a key
// (--fleet-hmac-key-file), one with another key and one without. What
// anyone who can write to Redis could send, an override record and a
// reset event without a signature, is applied by the instance without a
// key (so it is well formed) and refused, counted and logged by the keyed
// ones; an override and an event signed under one key are refused by the
// instance with the other.
func TestSignedFleetRefuses(t *testing.T) {
	srv := redistest.StartStandalone(t)
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = raw.Close() })
	ctx := context.Background()
	dir := overrideDir(t)
	start := func(key string) (*apptest.Running, *logtest.Buffer) {
		logs := &logtest.Buffer{}
		a := apptest.Start(t, dir, apptest.Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), Settings: func(s *app.Settings) {
			s.Store, s.Redis.Addrs, s.Redis.KeyPrefix = "redis", []string{srv.Addr}, "sf"
			s.Redis.Timeout, s.Failure.StoreTimeout = time.Second, 5*time.Second
			s.Redis.OverLimitCacheBytes = 1 << 20
			s.Overrides.Refresh = time.Hour // the tests read when they need to
			s.Fleet.HMACKey = app.Secret(key)
		}})
		polltest.Eventually(t, 5*time.Second, func() bool { return a.FleetListening() }, "the fleet channel is not subscribed")
		return a, logs
	}
	a, _ := start(fleetKey)
	b, bLogs := start(fleetKey)
	c, _ := start(otherKey)
	u, _ := start("")
	cb, cc, cu := dialApp(t, b), dialApp(t, c), dialApp(t, u)
	refused := func(x *apptest.Running, labels string) string {
		t.Helper()
		for line := range strings.Lines(apptest.Get(t, "http://"+x.HTTPAddr+"/metrics")) {
			if strings.HasPrefix(line, "tollgate_fleet_unsigned_refused_total{"+labels+"} ") {
				return strings.TrimSpace(strings.TrimPrefix(line, "tollgate_fleet_unsigned_refused_total{"+labels+"} "))
			}
		}
		return "0"
	}

	t.Run("forged override", func(t *testing.T) {
		expires := time.Now().Add(time.Hour)
		record := `{"id":"forged","domain":"o","entries":[{"key":"tenant","value":"forged"}],"multiplier":5,` +
			`"expires_at":"` + expires.UTC().Format(time.RFC3339Nano) + `","created_at":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"}`
		if err := raw.Set(ctx, "sf{%overrides}o:forged", record, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		if err := raw.ZAdd(ctx, "sf{%overrides}ids", goredis.Z{Score: float64(expires.UnixMilli()), Member: "forged"}).Err(); err != nil {
			t.Fatal(err)
		}
		for _, x := range []*apptest.Running{b, u} {
			if err := x.Overrides().Refresh(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got := limitName(tenantStatus(t, cu, "forged")); got != "override:forged" {
			t.Fatalf("the instance without a key applies %q, want the forged override: the test's record is wrong", got)
		}
		if got := limitName(tenantStatus(t, cb, "forged")); got != "per_tenant" {
			t.Errorf("the keyed instance applies %q, want its rule's limit", got)
		}
		if got := refused(b, `kind="override",reason="missing"`); got != "1" {
			t.Errorf("refused override records without a signature: %s, want 1", got)
		}
		if !strings.Contains(bLogs.String(), `msg="override record in redis without a valid signature; refused" component=overrides id=forged error="no signature"`) {
			t.Errorf("the refusal is not logged:\n%s", bLogs)
		}
		if _, err := b.Overrides().Delete(ctx, "forged"); err != nil {
			t.Errorf("deleting the forged override on the keyed instance: %v", err)
		}
	})

	t.Run("another key", func(t *testing.T) {
		o := create(t, a, "acme", time.Hour)
		for name, client := range map[string]*rlsclient.Client{"with the key": cb, "without a key": cu} {
			polltest.Eventually(t, 5*time.Second, func() bool { return limitName(tenantStatus(t, client, "acme")) == "override:"+o.ID },
				"the instance %s does not apply override %s", name, o.ID)
		}
		// The deletion of the forged override was an event too.
		polltest.Eventually(t, 5*time.Second, func() bool { return refused(c, `kind="event",reason="mismatch"`) == "2" },
			"the instance with another key does not refuse the events of the changes")
		if err := c.Overrides().Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if got := limitName(tenantStatus(t, cc, "acme")); got != "per_tenant" {
			t.Errorf("the instance with another key applies %q, want its rule's limit", got)
		}
		if got := refused(c, `kind="override",reason="mismatch"`); got != "1" {
			t.Errorf("override records refused by the instance with another key: %s, want 1", got)
		}
	})

	t.Run("forged reset", func(t *testing.T) {
		for _, client := range []*rlsclient.Client{cb, cu} {
			for _, tenant := range []string{"victim", "other"} {
				for range 3 { // the third is over the limit, and cached
					tenantStatus(t, client, tenant)
				}
			}
		}
		heldB, heldU := b.OverLimitLen(), u.OverLimitLen()
		if heldB < 2 || heldU < 2 {
			t.Fatalf("the over-limit caches hold %d and %d counters, want both tenants", heldB, heldU)
		}
		forged := `{"reset":[{"domain":"o","entries":[{"Key":"tenant","Value":"victim"}],"shard":"victim","kind":2,"period_us":3600000000}],"origin":"forger"}`
		if err := raw.Publish(ctx, "sf.fleet", forged).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Limiter().Reset(ctx, &limiter.Request{Domain: "o",
			Descriptors: []limiter.Descriptor{{Entries: []descriptor.Entry{{Key: "tenant", Value: "other"}}}}}); err != nil {
			t.Fatal(err)
		}
		// The channel keeps order: once the signed reset is applied, the
		// forged one before it has been read.
		polltest.Eventually(t, 5*time.Second, func() bool { return u.OverLimitLen() == heldU-2 },
			"the instance without a key holds %d counters, want %d: the test's event is wrong", u.OverLimitLen(), heldU-2)
		polltest.Eventually(t, 5*time.Second, func() bool { return b.OverLimitLen() <= heldB-1 }, "the keyed instance ignores the signed reset")
		if got := b.OverLimitLen(); got != heldB-1 {
			t.Errorf("the keyed instance holds %d counters, want %d: it applied the forged reset", got, heldB-1)
		}
		if got := refused(b, `kind="event",reason="missing"`); got != "1" {
			t.Errorf("refused events without a signature: %s, want 1", got)
		}
		if !strings.Contains(bLogs.String(), `msg="fleet event without a valid signature refused; more within a minute are only counted" component=fleet error="no signature"`) {
			t.Errorf("the refusal is not logged:\n%s", bLogs)
		}
	})

	// Both kinds in one series, held to the Prometheus conventions.
	problems, err := promlint.New(strings.NewReader(apptest.Get(t, "http://"+b.HTTPAddr+"/metrics"))).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}
