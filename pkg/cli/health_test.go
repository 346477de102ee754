package cli

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rls"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// closedPort returns a loopback address that nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// silentListener returns the address of a listener that accepts
// connections and never answers, until the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(conns)
				return
			}
			conns <- c // held open, never read
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

func TestHealth(t *testing.T) {
	serving := apptest.Start(t, "../../config-examples", apptest.Options{}).GRPCAddr
	closed := closedPort(t)
	silent := silentListener(t)
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string // a prefix of stderr; the rest is gRPC's own text
	}{
		{
			name:   "server serving",
			args:   []string{"--addr", serving},
			stdout: serving + ": SERVING\n",
		},
		{
			name:   "rate-limit service serving",
			args:   []string{"--addr", serving, "--service", rls.ServiceName},
			stdout: fmt.Sprintf("%s service %q: SERVING\n", serving, rls.ServiceName),
		},
		{
			name:   "store serving",
			args:   []string{"--addr", serving, "--service", rls.StoreServiceName},
			stdout: fmt.Sprintf("%s service %q: SERVING\n", serving, rls.StoreServiceName),
		},
		{
			name:   "unknown service",
			args:   []string{"--addr", serving, "--service", "nope"},
			code:   1,
			stderr: fmt.Sprintf("tollgate health: checking %s service \"nope\": NotFound: unknown service\n", serving),
		},
		{
			name:   "closed port",
			args:   []string{"--addr", closed},
			code:   1,
			stderr: fmt.Sprintf("tollgate health: checking %s: Unavailable: ", closed),
		},
		{
			name:   "no answer within the timeout",
			args:   []string{"--addr", silent, "--timeout", "200ms"},
			code:   1,
			stderr: fmt.Sprintf("tollgate health: checking %s: DeadlineExceeded: ", silent),
		},
		{
			name:   "stray argument",
			args:   []string{"--addr", serving, "extra"},
			code:   2,
			stderr: "tollgate health: usage: unexpected arguments [\"extra\"]\n",
		},
		{
			name:   "zero timeout",
			args:   []string{"--timeout", "0s"},
			code:   2,
			stderr: "tollgate health: usage: --timeout must be positive, got 0s\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runMain(append([]string{"health"}, tt.args...)...)
			if code != tt.code || stdout != tt.stdout || !strings.HasPrefix(stderr, tt.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr starting %q",
					code, stdout, stderr, tt.code, tt.stdout, tt.stderr)
			}
			if lines := strings.Count(stdout+stderr, "\n"); lines != 1 {
				t.Errorf("printed %d lines, want 1", lines)
			}
		})
	}
	if _, _, stderr := runMain("health", "--addr", closed); !strings.Contains(stderr, "connection refused") {
		t.Errorf("closed port: stderr %q does not say the connection was refused", stderr)
	}
}

// TestHealthNotServing checks the exit code and reason while the Redis
// store is down: the store's health service turns NOT_SERVING once the
// breaker opens.
func TestHealthNotServing(t *testing.T) {
	grpcAddr := apptest.Start(t, "../../config-examples", apptest.Options{Settings: func(s *app.Settings) {
		s.Store, s.Redis.Addrs, s.Failure.BreakerFailures = "redis", []string{closedPort(t)}, 1
	}}).GRPCAddr
	client, err := rlsclient.Dial(grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	req := rlsclient.Request{Domain: "tiers", Descriptors: [][]descriptor.Entry{{{Key: "tier", Value: "free"}, {Key: "api_key", Value: "k"}}}}
	want := fmt.Sprintf("tollgate health: %s service %q: not serving (NOT_SERVING)\n", grpcAddr, rls.StoreServiceName)
	err = polltest.Poll(10*time.Second, 20*time.Millisecond, nil, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := client.Query(ctx, req) // a failed decision opens the breaker
		cancel()
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		if code, stdout, stderr := runMain("health", "--addr", grpcAddr, "--service", rls.StoreServiceName); code != 1 || stdout != "" || stderr != want {
			return fmt.Errorf("store health with redis down: exit %d, stdout %q, stderr %q; want exit 1, stderr %q", code, stdout, stderr, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The server as a whole still serves: it answers by failure modes.
	if code, stdout, stderr := runMain("health", "--addr", grpcAddr); code != 0 {
		t.Errorf("server health with redis down: exit %d, stdout %q, stderr %q; want 0", code, stdout, stderr)
	}
}
