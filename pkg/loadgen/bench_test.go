package loadgen

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// serverProcessEnv makes the test binary run TestServerProcess as a fake
// RateLimitService for the benchmarks.
const serverProcessEnv = "LOADGEN_TEST_SERVER_PROCESS"

// TestServerProcess is not a test: in a child process started by
// startServerProcess it serves a fake that answers OK on a loopback port,
// prints the address, and stops when its standard input closes.
func TestServerProcess(t *testing.T) {
	if os.Getenv(serverProcessEnv) == "" {
		t.Skip("runs only as the benchmarks' server process")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, &fakeRLS{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	os.Stdout.WriteString(lis.Addr().String() + "\n")
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.Stop()
	<-served
}

// startServerProcess runs TestServerProcess in a child process, so that the
// benchmark's process CPU is the generator's alone, and returns its address.
func startServerProcess(b *testing.B) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerProcess$")
	cmd.Env = append(os.Environ(), serverProcessEnv+"=1")
	out := &firstLineWriter{line: make(chan string, 1)}
	cmd.Stdout = out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("server process: %v", err)
		}
	})
	select {
	case addr := <-out.line:
		return addr
	case <-time.After(30 * time.Second):
		b.Fatal("the server process printed no address within 30s")
		return ""
	}
}

// firstLineWriter sends the first line written to it on line and discards
// the rest.
type firstLineWriter struct {
	mu   sync.Mutex
	buf  []byte
	line chan string
	sent bool
}

// Write keeps p until the first line is complete, then discards everything.
func (w *firstLineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.sent {
		w.buf = append(w.buf, p...)
		if line, _, ok := strings.Cut(string(w.buf), "\n"); ok {
			w.line <- line
			w.sent = true
		}
	}
	return len(p), nil
}

// BenchmarkRun measures the generator's CPU per request (cpu-µs/req)
// against a trivial RateLimitService in another process.
func BenchmarkRun(b *testing.B) {
	addr := startServerProcess(b)
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"closed-c8", Options{Concurrency: 8, Conns: 2}},
		{"open-5000rps-c16", Options{Concurrency: 16, Conns: 2, Rate: 5000}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			o := bc.opts
			o.Addr, o.Domain, o.Keys, o.Distribution = addr, "bench", 100000, Zipf
			o.Descriptors = []string{"api_key=k{key},endpoint=/search", "tenant=t{key}"}
			o.Requests = int64(b.N)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res, err := Run(ctx, o)
			if err != nil {
				b.Fatal(err)
			}
			if res.Errors != 0 {
				b.Fatalf("%d errors: %v", res.Errors, res.ErrorsByCode)
			}
			b.ReportMetric(res.ClientCPUPerRequestUS, "cpu-µs/req")
			b.ReportMetric(res.RPS, "req/s")
			b.ReportMetric(float64(res.Latency.P99), "p99-µs")
		})
	}
}
