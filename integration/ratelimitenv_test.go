package integration

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/cli"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// egRules are rules in the shape Envoy Gateway writes for a global limit.
const egRules = `domain: eg
descriptors:
  - key: generic_key
    value: default
    descriptors:
      - key: client
        rate_limit: {unit: minute, requests_per_unit: 3}
`

// runtimeRoot returns a RUNTIME_ROOT whose ratelimit/config directory
// holds egRules.
func runtimeRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "ratelimit", "config", "eg.yaml"), egRules)
	return root
}

// startFromEnv runs `tollgate` with no arguments and nothing but env, as
// the image's /bin/ratelimit would run, until the test ends. It returns
// what the process logs.
func startFromEnv(t *testing.T, env map[string]string) *logtest.Buffer {
	t.Helper()
	logs := &logtest.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- cli.MainEnv(ctx, nil, io.Discard, logs, func(k string) string { return env[k] })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("tollgate exited %d; logs:\n%s", code, logs)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("tollgate did not stop within 10 s of the cancel")
		}
	})
	return logs
}

// TestServesRatelimitEnvironment starts tollgate with nothing but the
// environment Envoy Gateway's Helm chart gives envoyproxy/ratelimit, and
// checks that it serves the runtime directory's rules on those ports,
// counts in the Redis of REDIS_URL, and counts in fixed windows, charged
// always.
func TestServesRatelimitEnvironment(t *testing.T) {
	srv := redistest.StartStandalone(t)
	root := runtimeRoot(t)
	writeFile(t, filepath.Join(root, "ratelimit", "config", ".hidden.yaml"), "not: [yaml")
	grpcAddr, httpAddr, debugAddr := closedAddr(t), closedAddr(t), closedAddr(t)
	port := func(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }
	// HOST, GRPC_HOST and DEBUG_HOST default to 0.0.0.0 in ratelimit;
	// the test binds loopback only.
	env := map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true",
		"USE_STATSD": "false", "LOG_LEVEL": "info", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr,
		"HOST": "127.0.0.1", "PORT": port(httpAddr), "GRPC_HOST": "127.0.0.1", "GRPC_PORT": port(grpcAddr),
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": port(debugAddr),
	}
	logs := startFromEnv(t, env)

	polltest.EventuallyEvery(t, 10*time.Second, pollEvery, func() bool {
		resp, err := http.Get("http://" + httpAddr + "/healthcheck")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "GET /healthcheck on PORT answers 200")
	client, err := rlsclient.Dial(grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	// Three hits pass, the fourth is over the limit until the end of the
	// minute, counted from the epoch. A sequence that straddles a minute
	// boundary is retried with a fresh client value.
	for attempt := range 3 {
		desc := entries("generic_key", "default", "client", "c"+string(rune('0'+attempt)))
		start := time.Now()
		var over *rlsv3.RateLimitResponse
		for i := range 4 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := client.Query(ctx, rlsclient.Request{Domain: "eg", Descriptors: [][]descriptor.Entry{desc}})
			cancel()
			if err != nil {
				t.Fatalf("ShouldRateLimit: %v", err)
			}
			want := rlsv3.RateLimitResponse_OK
			if i == 3 {
				want, over = rlsv3.RateLimitResponse_OVER_LIMIT, resp
			}
			if resp.OverallCode != want {
				t.Fatalf("hit %d: %v, want %v", i+1, resp.OverallCode, want)
			}
		}
		end := time.Now()
		windowEnd := start.Truncate(time.Minute).Add(time.Minute)
		if end.After(windowEnd) {
			continue // crossed a window boundary: the reset is ambiguous
		}
		st := over.Statuses[0]
		reset := st.DurationUntilReset.AsDuration()
		// The answer came between start and end; reset is rounded to whole
		// seconds either way.
		lo, hi := windowEnd.Sub(end)-time.Second, windowEnd.Sub(start)+time.Second
		if reset < lo || reset > hi {
			t.Errorf("duration_until_reset %v, want the rest of the minute window, between %v and %v", reset, lo, hi)
		}
		if st.CurrentLimit.GetRequestsPerUnit() != 3 || st.LimitRemaining != 0 {
			t.Errorf("status %v, want limit 3 per minute and none remaining", st)
		}
		break
	}

	// It counted in the Redis of REDIS_URL.
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n == 0 {
		t.Errorf("redis at REDIS_URL holds %d keys (%v), want the counters", n, err)
	}

	got := logs.String()
	for _, want := range []string{
		`msg="envoyproxy/ratelimit environment honoured" variables=RUNTIME_ROOT,RUNTIME_SUBDIRECTORY,RUNTIME_WATCH_ROOT,RUNTIME_IGNOREDOTFILES,HOST,PORT,GRPC_HOST,GRPC_PORT,DEBUG_HOST,DEBUG_PORT,LOG_LEVEL,REDIS_URL,REDIS_SOCKET_TYPE,USE_STATSD`,
		`msg="envoyproxy/ratelimit environment: default algorithm fixed_window, default charge always, as envoyproxy/ratelimit counts"`,
		`msg="envoyproxy/ratelimit environment: response headers none, as envoyproxy/ratelimit sends none without LIMIT_RESPONSE_HEADERS_ENABLED"`,
		"counting in redis",
	} {
		if strings.Count(got, want) != 1 {
			t.Errorf("logs hold %q %d times, want once:\n%s", want, strings.Count(got, want), got)
		}
	}
	if strings.Contains(got, "level=WARN") {
		t.Errorf("warnings logged from Envoy Gateway's environment:\n%s", got)
	}
}

// TestRatelimitEnvironmentRejected checks that a variable tollgate cannot
// honour stops the start with its name.
func TestRatelimitEnvironmentRejected(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "127.0.0.1:11211"},
			"serve: envoyproxy/ratelimit environment: BACKEND_TYPE: memcache is not supported: tollgate counts in redis (or in memory)\n"},
		{map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/var/run/nutcracker/ratelimit.sock"},
			"serve: envoyproxy/ratelimit environment: REDIS_SOCKET_TYPE: unix sockets are not supported: tollgate connects to redis over tcp\n"},
	} {
		var stderr bytes.Buffer
		code := cli.MainEnv(context.Background(), nil, io.Discard, &stderr, func(k string) string { return tt.env[k] })
		if code != 1 || !strings.HasSuffix(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tt.env, code, stderr.String(), tt.want)
		}
	}
}
