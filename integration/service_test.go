// Package integration tests tollgate end to end: a real App on loopback
// listeners, called over gRPC and HTTP.
package integration

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

const searchRules = `domain: api
descriptors:
  - key: api_key
    descriptors:
      - key: endpoint
        value: /search
        rate_limit: {unit: minute, requests_per_unit: 3, name: search}
`

// service is a running App and a client of it.
type service struct {
	dir       string
	grpcAddr  string
	httpAddr  string
	adminAddr string // "" while the admin API is off
	debugAddr string
	client    *rlsclient.Client
	// stop cancels the App's context and returns Run's error; it runs
	// once, and at the test's end if the test did not call it.
	stop func() error
}

// startService runs an App on loopback ports serving the rules in files,
// with the memory store unless tweak changes the settings.
func startService(t *testing.T, files map[string]string, tweak ...func(*app.Settings)) *service {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		writeFile(t, filepath.Join(dir, name), body)
	}
	return startServiceIn(t, dir, tweak...)
}

// countIn returns the settings that count in the Redis deployment at
// addrs under prefix. Exactness is the point of the tests that use it,
// not the failure modes: a decision may wait on a loaded machine rather
// than be answered degraded.
func countIn(redisType string, addrs []string, prefix string) func(*app.Settings) {
	return func(s *app.Settings) {
		s.Store, s.Redis.Type, s.Redis.Addrs = "redis", redisType, addrs
		s.Redis.KeyPrefix, s.Redis.Timeout, s.Redis.DialTimeout = prefix, time.Second, time.Second
		s.Failure.StoreTimeout = 5 * time.Second
	}
}

// startServiceIn runs an App serving the rules already in dir.
func startServiceIn(t *testing.T, dir string, tweak ...func(*app.Settings)) *service {
	t.Helper()
	return startServiceLogging(t, dir, io.Discard, tweak...)
}

// startServiceLogging runs an App serving the rules in dir that logs to w,
// at debug level.
func startServiceLogging(t *testing.T, dir string, w io.Writer, tweak ...func(*app.Settings)) *service {
	t.Helper()
	r := apptest.Start(t, dir, apptest.Options{
		Logger: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Settings: func(s *app.Settings) {
			s.Limits.MemoryMaxKeys, s.Limits.MaxDescriptors, s.Limits.MaxEntries, s.Limits.MaxKeyLen, s.Limits.MaxValueLen = 10000, 8, 8, 64, 256
			for _, f := range tweak {
				f(s)
			}
		},
	})
	client, err := rlsclient.Dial(r.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	svc := &service{dir: dir, grpcAddr: r.GRPCAddr, httpAddr: r.HTTPAddr, adminAddr: r.AdminAddr, debugAddr: r.DebugAddr, client: client, stop: r.Stop}
	return svc
}

func (s *service) query(t *testing.T, domain string, descs ...[]descriptor.Entry) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := s.client.Query(ctx, rlsclient.Request{Domain: domain, Descriptors: descs})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// get returns the body of GET http://addr/path.
func (s *service) get(t *testing.T, addr, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

func entries(kv ...string) []descriptor.Entry {
	var out []descriptor.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, descriptor.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// pollEvery is how often these tests poll a condition: most conditions
// call the service under test, which polling every few milliseconds would
// load.
const pollEvery = 10 * time.Millisecond

func TestLimitEnforcedOverGRPC(t *testing.T) {
	svc := startService(t, map[string]string{"api.yaml": searchRules})
	search := entries("api_key", "k1", "endpoint", "/search")
	for i := range 3 {
		resp := svc.query(t, "api", search)
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d: %v, want OK", i+1, resp.OverallCode)
		}
		st := resp.Statuses[0]
		if got, want := st.LimitRemaining, uint32(2-i); got != want {
			t.Errorf("call %d: remaining %d, want %d", i+1, got, want)
		}
		if st.CurrentLimit.GetRequestsPerUnit() != 3 || st.CurrentLimit.GetName() != "search" {
			t.Errorf("call %d: current_limit %v", i+1, st.CurrentLimit)
		}
	}
	resp := svc.query(t, "api", search, entries("api_key", "k1", "endpoint", "/other"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("4th call: %v, want OVER_LIMIT", resp.OverallCode)
	}
	if len(resp.Statuses) != 2 || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.Statuses[1].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[1].CurrentLimit != nil {
		t.Fatalf("statuses %v, want [OVER_LIMIT, OK without limit]", resp.Statuses)
	}
	if h := header(resp, "Retry-After"); h == "" {
		t.Errorf("no Retry-After on OVER_LIMIT; headers %v", resp.ResponseHeadersToAdd)
	}
	// Another client is unaffected.
	if resp := svc.query(t, "api", entries("api_key", "k2", "endpoint", "/search")); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("other api_key: %v, want OK", resp.OverallCode)
	}
}

func TestMalformedRequestIsInvalidArgument(t *testing.T) {
	svc := startService(t, map[string]string{"api.yaml": searchRules})
	tests := map[string]rlsclient.Request{
		"no domain":      {Descriptors: [][]descriptor.Entry{entries("a", "b")}},
		"no descriptors": {Domain: "api"},
		"empty key":      {Domain: "api", Descriptors: [][]descriptor.Entry{entries("", "b")}},
		"long value":     {Domain: "api", Descriptors: [][]descriptor.Entry{entries("a", strings.Repeat("v", 257))}},
	}
	for name, req := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := svc.client.Query(context.Background(), req)
			if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() == "" {
				t.Fatalf("error %v, want InvalidArgument with a reason", err)
			}
		})
	}
}

func TestReloadKeepsLastGoodTree(t *testing.T) {
	svc := startService(t, map[string]string{"api.yaml": searchRules})
	tier := entries("tier", "free")
	if resp := svc.query(t, "api", tier); resp.Statuses[0].CurrentLimit != nil {
		t.Fatalf("tier matched a rule before it was configured: %v", resp.Statuses[0])
	}

	// A good edit is live within a second.
	writeFile(t, filepath.Join(svc.dir, "api.yaml"), searchRules+`  - key: tier
    value: free
    rate_limit: {unit: hour, requests_per_unit: 7}
`)
	polltest.EventuallyEvery(t, 2*time.Second, pollEvery, func() bool {
		return svc.query(t, "api", tier).Statuses[0].CurrentLimit.GetRequestsPerUnit() == 7
	}, "new rule live")

	// A broken edit is recorded, and the previous tree stays live.
	writeFile(t, filepath.Join(svc.dir, "api.yaml"), "domain: api\ndescriptors:\n  - key: tier\n    bogus: 1\n")
	polltest.EventuallyEvery(t, 2*time.Second, pollEvery, func() bool {
		return strings.Contains(svc.get(t, svc.debugAddr, "/debug/config"), "last reload failed")
	}, "broken reload reported on /debug/config")
	if resp := svc.query(t, "api", tier); resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 7 {
		t.Fatalf("after a broken edit the rule changed: %v", resp.Statuses[0])
	}
	if cfg := svc.get(t, svc.debugAddr, "/debug/config"); !strings.Contains(cfg, "bogus") {
		t.Errorf("/debug/config does not name the broken field:\n%s", cfg)
	}
}

func TestHTTPCheckAndHealth(t *testing.T) {
	svc := startService(t, map[string]string{"api.yaml": searchRules})
	body := `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"h1"},{"key":"endpoint","value":"/search"}],"hits":3}]}`
	resp, err := http.Post("http://"+svc.httpAddr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Allowed  bool
		Statuses []struct {
			Remaining *uint32
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !out.Allowed || out.Statuses[0].Remaining == nil || *out.Statuses[0].Remaining != 0 {
		t.Fatalf("first check: %d %+v, want 200 allowed with remaining 0", resp.StatusCode, out)
	}
	resp, err = http.Post("http://"+svc.httpAddr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("second check: %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	for _, path := range []string{"/healthz", "/readyz", "/healthcheck", "/metrics"} {
		resp, err := http.Get("http://" + svc.httpAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
	}

	hc := healthpb.NewHealthClient(svc.client.Conn())
	hr, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health: %v %v, want SERVING", hr, err)
	}
}

func header(resp *rlsv3.RateLimitResponse, key string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if strings.EqualFold(h.Key, key) {
			return h.Value
		}
	}
	return ""
}
