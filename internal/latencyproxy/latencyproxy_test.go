package latencyproxy_test

import (
	"bufio"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/latencyproxy"
)

// startEcho starts a line echo server on 127.0.0.1 that stops in
// t.Cleanup, and returns its address.
func startEcho(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		lis.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	return lis.Addr().String()
}

// roundTrip sends line over c and returns how long its echo took.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) time.Duration {
	t.Helper()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if got != line+"\n" {
		t.Fatalf("echo of %q: %q", line, got)
	}
	return took
}

// fastest returns the shortest of n round trips: the latency the proxy
// adds, plus the least the machine adds.
func fastest(t *testing.T, c net.Conn, r *bufio.Reader, n int) time.Duration {
	t.Helper()
	best := time.Hour
	for i := range n {
		best = min(best, roundTrip(t, c, r, strings.Repeat("x", i+1)))
	}
	return best
}

func TestLatency(t *testing.T) {
	echo := startEcho(t)
	for _, latency := range []time.Duration{0, 500 * time.Microsecond, 2 * time.Millisecond} {
		t.Run(latency.String(), func(t *testing.T) {
			p := latencyproxy.Start(t, echo, latency)
			if !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
				t.Errorf("Addr() = %q, want one on 127.0.0.1", p.Addr())
			}
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := bufio.NewReader(c)
			got := fastest(t, c, r, 20)
			// Timers and goroutines only add to the delay; the upper
			// bound only catches a delay counted in the wrong unit.
			if got < latency || got > latency+20*time.Millisecond {
				t.Errorf("fastest round trip %v, want %v or a little more", got, latency)
			}
			t.Logf("latency %v: fastest of 20 round trips %v", latency, got)
		})
	}
}

// TestSpike raises the latency of an open connection with a spike, and
// lowers it again.
func TestSpike(t *testing.T) {
	const base, spike = 500 * time.Microsecond, 30 * time.Millisecond
	p := latencyproxy.Start(t, startEcho(t), base)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	before := fastest(t, c, r, 5)
	if err := p.Spike(spike); err != nil {
		t.Fatal(err)
	}
	if got := p.Latency(); got != base+spike {
		t.Errorf("Latency() during the spike = %v, want %v", got, base+spike)
	}
	during := fastest(t, c, r, 5)
	if err := p.EndSpike(); err != nil {
		t.Fatal(err)
	}
	after := fastest(t, c, r, 5)
	t.Logf("fastest round trips: %v before the spike, %v during, %v after", before, during, after)
	if during < base+spike {
		t.Errorf("round trip during the spike %v, want at least %v", during, base+spike)
	}
	if before >= spike || after >= spike {
		t.Errorf("round trips outside the spike %v before, %v after, want well under %v", before, after, spike)
	}
	if got := p.Latency(); got != base {
		t.Errorf("Latency() after the spike = %v, want %v", got, base)
	}
	if err := p.Spike(0); err == nil {
		t.Error("Spike(0) = nil, want an error")
	}
}

func TestNegativeLatency(t *testing.T) {
	if _, err := latencyproxy.New("127.0.0.1:1", -time.Millisecond); err == nil {
		t.Error("New with a negative latency = nil error")
	}
}

// TestClose closes the proxy's connections.
func TestClose(t *testing.T) {
	p := latencyproxy.Start(t, startEcho(t), 0)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip(t, c, r, "hello")
	p.Close()
	p.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadString('\n'); err == nil {
		t.Error("a connection read after Close, want it closed")
	}
	if err := p.Spike(time.Millisecond); err == nil {
		t.Error("Spike after Close = nil, want an error")
	}
}
