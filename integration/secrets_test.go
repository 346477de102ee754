package integration

import (
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/cli"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
	"github.com/tollgatehq/tollgate/pkg/tlsfiles/tlsfilestest"
)

// TestSecretsStayOut runs tollgate with a wrong Redis password, given as a
// setting and inside a URL, and checks that neither appears in its logs
// (debug level, go-redis's own lines included), /debug/config or /metrics
// while every decision fails on it.
func TestSecretsStayOut(t *testing.T) {
	srv := redistest.StartStandalone(t, redistest.WithPassword("the-right-one"))
	const setting, inURL = "wrong-setting-pw-5b1e", "wrong-url-pw-77c2"
	for name, tweak := range map[string]func(*app.Settings){
		"setting": func(s *app.Settings) { s.Redis.Addrs, s.Redis.Password = []string{srv.Addr}, setting },
		"url":     func(s *app.Settings) { s.Redis.Addrs = []string{"redis://:" + inURL + "@" + srv.Addr + "/0"} },
	} {
		t.Run(name, func(t *testing.T) {
			var logs logtest.Buffer
			// go-redis's own lines too; serve routes them the same way.
			redis.RouteClientLogs(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
			t.Cleanup(func() { redis.RouteClientLogs(slog.New(slog.DiscardHandler)) })
			svc := startServiceLogging(t, t.TempDir(), &logs, func(s *app.Settings) {
				s.Store = "redis"
				tweak(s)
			})
			writeFile(t, svc.dir+"/api.yaml", searchRules)
			polltest.EventuallyEvery(t, settle, pollEvery, func() bool {
				return strings.Contains(svc.get(t, svc.debugAddr, "/debug/config"), "search")
			}, "the rules to load")
			for range 10 { // enough failures to open the breaker
				svc.query(t, "api", []descriptor.Entry{{Key: "api_key", Value: "k"}, {Key: "endpoint", Value: "/search"}})
			}
			if !strings.Contains(logs.String(), "WRONGPASS") {
				t.Fatalf("the logs do not show the authentication failure:\n%s", logs.String())
			}
			seen := map[string]string{
				"logs":          logs.String(),
				"/debug/config": svc.get(t, svc.debugAddr, "/debug/config"),
				"/metrics":      svc.get(t, svc.httpAddr, "/metrics"),
				"/readyz":       svc.get(t, svc.httpAddr, "/readyz"),
			}
			for where, text := range seen {
				for _, secret := range []string{setting, inURL} {
					if strings.Contains(text, secret) {
						t.Errorf("%s shows the password %q", where, secret)
					}
				}
			}
		})
	}
}

// TestSecretsTLSKeyStaysOut serves gRPC over TLS, rotates the key, once to
// a key that does not match and once for good, and checks that no line of
// any private key appears in the logs (debug level), /debug/config,
// /metrics or /readyz. The key files' paths may appear; their contents
// never.
func TestSecretsTLSKeyStaysOut(t *testing.T) {
	ts := newTLSSetup(t)
	var logs logtest.Buffer
	// Mutual TLS, so the client CA is read too. servedSerial presents no
	// client certificate, but sees the server's before it is refused.
	svc := startServiceLogging(t, t.TempDir(), &logs, ts.settings(true, ""))
	next := ts.serverCA.Server(t, tlsfilestest.Names{DNS: []string{tlsServerName}})
	mismatched := ts.files(next)
	mismatched["tls.key"] = ts.server.KeyPEM
	ts.mount.Update(t, mismatched)
	ts.servedSerial(t, svc.grpcAddr) // a handshake reads the files
	ts.mount.Update(t, ts.files(next))
	if got := ts.servedSerial(t, svc.grpcAddr); got.Cmp(next.Serial) != 0 {
		t.Fatalf("served serial %x, want %x", got, next.Serial)
	}
	if !strings.Contains(logs.String(), "private key does not match public key") {
		t.Fatalf("the logs do not show the mismatched key:\n%s", logs.String())
	}
	seen := map[string]string{
		"logs":          logs.String(),
		"/debug/config": svc.get(t, svc.debugAddr, "/debug/config"),
		"/metrics":      svc.get(t, svc.httpAddr, "/metrics"),
		"/readyz":       svc.get(t, svc.httpAddr, "/readyz"),
	}
	for where, text := range seen {
		for _, key := range [][]byte{ts.server.KeyPEM, next.KeyPEM} {
			for line := range strings.SplitSeq(string(key), "\n") {
				if len(line) > 16 && !strings.HasPrefix(line, "-----") && strings.Contains(text, line) {
					t.Errorf("%s shows a line of a private key", where)
				}
			}
		}
	}
}

// TestSecretsRatelimitAuthStaysOut starts tollgate from envoyproxy/ratelimit's
// environment with REDIS_AUTH, in both its forms, and checks that the
// right one authenticates and that a wrong one appears in no log line
// (debug level, go-redis's included), /debug/config, /metrics or /readyz.
func TestSecretsRatelimitAuthStaysOut(t *testing.T) {
	srv := redistest.StartStandalone(t, redistest.WithPassword("the-right-one"))
	t.Cleanup(func() { redis.RouteClientLogs(slog.New(slog.DiscardHandler)) }) // serve routed them to its logger
	for _, tt := range []struct {
		name, auth string
		secret     string // must not be shown
		ok         bool
	}{
		{"password", "the-right-one", "the-right-one", true},
		{"user and password", "default:the-right-one", "the-right-one", true},
		{"wrong password", "wrong-auth-pw-3f9a", "wrong-auth-pw-3f9a", false},
		{"wrong user password", "default:wrong-auth-pw-81d0", "wrong-auth-pw-81d0", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := runtimeRoot(t)
			grpcAddr, httpAddr, debugAddr := closedAddr(t), closedAddr(t), closedAddr(t)
			port := func(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }
			logs := startFromEnv(t, map[string]string{
				"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "LOG_LEVEL": "debug",
				"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr, "REDIS_AUTH": tt.auth,
				"HOST": "127.0.0.1", "PORT": port(httpAddr), "GRPC_HOST": "127.0.0.1", "GRPC_PORT": port(grpcAddr),
				"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": port(debugAddr),
			})
			svc := &service{grpcAddr: grpcAddr, httpAddr: httpAddr, debugAddr: debugAddr}
			polltest.EventuallyEvery(t, settle, pollEvery, func() bool {
				resp, err := http.Get("http://" + debugAddr + "/debug/config")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			}, "the rules to load")
			client, err := rlsclient.Dial(grpcAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			svc.client = client
			desc := entries("generic_key", "default", "client", tt.name) // the subtests share the Redis
			if tt.ok {
				for i := range 4 {
					want := rlsv3.RateLimitResponse_OK
					if i == 3 {
						want = rlsv3.RateLimitResponse_OVER_LIMIT
					}
					if got := svc.query(t, "eg", desc).OverallCode; got != want {
						t.Fatalf("hit %d: %v, want %v; logs:\n%s", i+1, got, want, logs)
					}
				}
			} else {
				polltest.EventuallyEvery(t, settle, pollEvery, func() bool {
					svc.query(t, "eg", desc)
					return strings.Contains(logs.String(), "WRONGPASS")
				}, "the authentication failure to be logged")
			}
			seen := map[string]string{
				"logs":          logs.String(),
				"/debug/config": svc.get(t, debugAddr, "/debug/config"),
				"/metrics":      svc.get(t, httpAddr, "/metrics"),
				"/readyz":       svc.get(t, httpAddr, "/readyz"),
			}
			if !strings.Contains(seen["logs"], "REDIS_AUTH") {
				t.Errorf("the logs do not name REDIS_AUTH as honoured:\n%s", seen["logs"])
			}
			for where, text := range seen {
				if strings.Contains(text, tt.secret) {
					t.Errorf("%s shows the password", where)
				}
			}
		})
	}
}

// TestSecretsAdminTokensStayOut serves the admin API with a token file and
// an environment token on the Redis store, where overrides and resets
// travel through Redis, makes every kind of admin call with the right
// tokens and a wrong one, and checks that no token appears in the logs
// (debug level), the audit log, /debug/config, /metrics or /readyz.
func TestSecretsAdminTokensStayOut(t *testing.T) {
	srv := redistest.StartStandalone(t)
	const fileToken, envToken, wrong = "file-admin-token-6a2e", "env-admin-token-c94b", "wrong-admin-token-17fd"
	dir := t.TempDir()
	tokenFile, auditFile := filepath.Join(t.TempDir(), "tokens"), filepath.Join(t.TempDir(), "audit.jsonl")
	writeFile(t, tokenFile, "ops "+fileToken+"\n")
	var logs logtest.Buffer
	t.Cleanup(func() { redis.RouteClientLogs(slog.New(slog.DiscardHandler)) })
	redis.RouteClientLogs(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	svc := startServiceLogging(t, dir, &logs, func(s *app.Settings) {
		s.Store, s.Redis.Addrs = "redis", []string{srv.Addr}
		s.Admin.TokenFile, s.Admin.Token, s.Admin.AuditLog = tokenFile, envToken, auditFile
	})
	writeFile(t, svc.dir+"/api.yaml", searchRules)
	polltest.EventuallyEvery(t, settle, pollEvery, func() bool {
		return strings.Contains(svc.get(t, svc.debugAddr, "/debug/config"), "search")
	}, "the rules to load")
	call := func(token, method, path, body string) int {
		return apptest.Send(t, method, "http://"+svc.adminAddr+path, token, body)
	}
	search := `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k"},{"key":"endpoint","value":"/search"}]}]}`
	for _, token := range []string{fileToken, envToken, wrong} {
		want := http.StatusCreated
		if token == wrong {
			want = http.StatusUnauthorized
		}
		if got := call(token, "POST", "/v1/overrides",
			`{"domain":"api","entries":[{"key":"api_key","value":"k"}],"multiplier":2,"expires_in":"1h","reason":"test"}`); got != want {
			t.Errorf("create with token %q: %d, want %d", token, got, want)
		}
		call(token, "POST", "/v1/remaining", search)
		call(token, "POST", "/v1/reset", search)
		call(token, "GET", "/v1/overrides", "")
		call(token, "GET", "/v1/audit", "")
	}
	audit, err := os.ReadFile(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{
		"logs":          logs.String(),
		"audit log":     string(audit),
		"/debug/config": svc.get(t, svc.debugAddr, "/debug/config"),
		"/metrics":      svc.get(t, svc.httpAddr, "/metrics"),
		"/readyz":       svc.get(t, svc.httpAddr, "/readyz"),
	}
	if !strings.Contains(seen["audit log"], `"actor":"ops"`) || !strings.Contains(seen["audit log"], `"actor":"env"`) {
		t.Fatalf("the admin calls were not audited:\n%s", seen["audit log"])
	}
	for where, text := range seen {
		for _, token := range []string{fileToken, envToken, wrong} {
			if strings.Contains(text, token) {
				t.Errorf("%s shows the admin token %q", where, token)
			}
		}
	}
}

// TestSecretsXDSHeadersStayOut takes the rules over xDS from a server that
// needs a token in the stream's headers (--xds-headers), loses the server,
// and checks that the token reached the server but appears nowhere in the
// logs (debug level), /debug/config, /metrics or /readyz.
func TestSecretsXDSHeadersStayOut(t *testing.T) {
	const token = "xds-bearer-token-3f8a"
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var presented atomic.Bool
	srv := grpc.NewServer(grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		if !slices.Contains(md.Get("authorization"), "Bearer "+token) {
			return status.Error(codes.Unauthenticated, "no token")
		}
		presented.Store(true)
		return handler(srv, ss)
	}))
	cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, serverv3.NewServer(t.Context(), cache, nil))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	snap, err := cachev3.NewSnapshot("1", map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: {
		&rlsconfv3.RateLimitConfig{Name: "api", Domain: "api", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "api_key", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 5},
		}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.SetSnapshot(t.Context(), "secrets-test", snap); err != nil {
		t.Fatal(err)
	}

	var logs logtest.Buffer
	svc := startServiceLogging(t, "", &logs, func(s *app.Settings) {
		s.XDS.ConfigType, s.XDS.Server, s.XDS.NodeID, s.XDS.RetryInterval = "xds", lis.Addr().String(), "secrets-test", 20*time.Millisecond
		s.XDS.Headers = "Authorization=Bearer " + token
	})
	polltest.EventuallyEvery(t, settle, pollEvery, func() bool {
		return strings.Contains(svc.get(t, svc.debugAddr, "/debug/config"), "api_key")
	}, "the rules over xDS did not load")
	if !presented.Load() {
		t.Fatal("the rules loaded without the token reaching the server")
	}
	srv.Stop()
	polltest.EventuallyEvery(t, settle, pollEvery, func() bool {
		return strings.Contains(logs.String(), "xDS stream ended")
	}, "the lost xDS server was not logged")
	seen := map[string]string{
		"logs":          logs.String(),
		"/debug/config": svc.get(t, svc.debugAddr, "/debug/config"),
		"/metrics":      svc.get(t, svc.httpAddr, "/metrics"),
		"/readyz":       svc.get(t, svc.httpAddr, "/readyz"),
	}
	for where, text := range seen {
		if strings.Contains(text, token) {
			t.Errorf("%s shows the xDS token", where)
		}
	}
}

// TestSecretsFleetHMACKeyStaysOut starts tollgate from the command line
// with --fleet-hmac-key-file on Redis, makes admin changes that travel
// signed (an override, a reset), has a forged override record and a forged
// event refused, and checks that the key, as it is or in hex, appears in
// no log line (debug level, go-redis's included), the audit log,
// /debug/config, /metrics or /readyz. A key too short is refused at start
// with an error that gives its length, never the key.
func TestSecretsFleetHMACKeyStaysOut(t *testing.T) {
	srv := redistest.StartStandalone(t)
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = raw.Close() })
	t.Cleanup(func() { redis.RouteClientLogs(slog.New(slog.DiscardHandler)) }) // serve routed them to its logger
	const key, short, token = "fleet-hmac-key-5e0b7c1d9a2f4e6813", "short-fleet-key-9d3e", "admin-token-for-the-key-test-41c7"
	dir, files := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(dir, "api.yaml"), searchRules)
	keyFile, shortFile, auditFile := filepath.Join(files, "fleet.key"), filepath.Join(files, "short.key"), filepath.Join(files, "audit.jsonl")
	writeFile(t, keyFile, key+"\n")
	writeFile(t, shortFile, short+"\n")
	getenv := func(k string) string { return map[string]string{"TOLLGATE_ADMIN_TOKEN": token}[k] }
	grpcAddr, httpAddr, adminAddr, debugAddr := closedAddr(t), closedAddr(t), closedAddr(t), closedAddr(t)
	args := func(keyFile string) []string {
		return []string{"serve", "--config-dir", dir, "--store", "redis", "--redis-addrs", srv.Addr, "--fleet-hmac-key-file", keyFile,
			"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--admin-addr", adminAddr, "--debug-addr", debugAddr,
			"--audit-log", auditFile, "--log-level", "debug"}
	}

	var refusal logtest.Buffer
	if code := cli.MainEnv(t.Context(), args(shortFile), io.Discard, &refusal, getenv); code == 0 {
		t.Fatal("tollgate started with a 20-byte key")
	}
	if !strings.Contains(refusal.String(), "fleet-hmac-key-file: the key is 20 bytes long; at least 32 are needed") {
		t.Errorf("the refusal of the short key does not say why:\n%s", refusal.String())
	}

	var logs logtest.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- cli.MainEnv(ctx, args(keyFile), io.Discard, &logs, getenv) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("tollgate exited %d; logs:\n%s", code, logs.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("tollgate did not stop within 10 s of the cancel")
		}
	})
	svc := &service{grpcAddr: grpcAddr, httpAddr: httpAddr, adminAddr: adminAddr, debugAddr: debugAddr}
	polltest.EventuallyEvery(t, settle, pollEvery, func() bool {
		resp, err := http.Get("http://" + debugAddr + "/debug/config")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "tollgate to serve")
	call := func(method, path, body string) int {
		return apptest.Send(t, method, "http://"+adminAddr+path, token, body)
	}
	if got := call("POST", "/v1/overrides",
		`{"domain":"api","entries":[{"key":"api_key","value":"k"}],"multiplier":2,"expires_in":"1h","reason":"test"}`); got != http.StatusCreated {
		t.Fatalf("creating an override: %d", got)
	}
	call("POST", "/v1/reset", `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k"},{"key":"endpoint","value":"/search"}]}]}`)
	records, err := raw.Keys(t.Context(), "tg{%overrides}o:*").Result()
	if err != nil || len(records) != 1 {
		t.Fatalf("override records in redis: %v, %v", records, err)
	}
	if record, err := raw.Get(t.Context(), records[0]).Result(); err != nil || !strings.Contains(record, `"sig":"`) {
		t.Fatalf("the override record is not signed: %s, %v", record, err)
	}

	// Forged, as anyone who can write to Redis could.
	expires := time.Now().Add(time.Hour)
	if err := raw.Set(t.Context(), "tg{%overrides}o:forged", `{"id":"forged","domain":"api","entries":[{"key":"api_key","value":"k"}],"multiplier":100,`+
		`"expires_at":"`+expires.UTC().Format(time.RFC3339)+`","created_at":"`+time.Now().UTC().Format(time.RFC3339)+`"}`, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.ZAdd(t.Context(), "tg{%overrides}ids", goredis.Z{Score: float64(expires.UnixMilli()), Member: "forged"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Publish(t.Context(), "tg.fleet", `{"overrides":true,"origin":"forger"}`).Err(); err != nil {
		t.Fatal(err)
	}
	polltest.EventuallyEvery(t, settle, pollEvery, func() bool {
		call("GET", "/v1/overrides", "") // reads the records
		metrics := svc.get(t, httpAddr, "/metrics")
		return strings.Contains(metrics, `tollgate_fleet_unsigned_refused_total{kind="event",reason="missing"} 1`) &&
			strings.Contains(metrics, `tollgate_fleet_unsigned_refused_total{kind="override",reason="missing"} 1`)
	}, "the forged record and event to be refused")

	audit, err := os.ReadFile(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{
		"logs":          logs.String(),
		"start refusal": refusal.String(),
		"audit log":     string(audit),
		"/debug/config": svc.get(t, debugAddr, "/debug/config"),
		"/metrics":      svc.get(t, httpAddr, "/metrics"),
		"/readyz":       svc.get(t, httpAddr, "/readyz"),
	}
	if !strings.Contains(seen["logs"], "overrides and fleet events are signed") || !strings.Contains(seen["audit log"], `"actor":"env"`) {
		t.Fatalf("the key or the admin calls do not show as used:\n%s\n%s", seen["logs"], seen["audit log"])
	}
	for where, text := range seen {
		for _, secret := range []string{key, short, hex.EncodeToString([]byte(key)), hex.EncodeToString([]byte(short))} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows the fleet key %q", where, secret)
			}
		}
	}
}
