// Package latencyproxy puts a network between a client and a TCP server on
// one machine, for tests and load tests: a proxy of Shopify's toxiproxy,
// used as a library, that listens on 127.0.0.1 and delays the data it
// forwards so that every round trip takes a set latency longer. A spike
// adds more latency at run time, for the connections already open as for
// new ones, until it ends.
//
// What it guarantees: no byte is forwarded before its delay (half the
// latency each way) has passed since the proxy read it, and bytes keep
// their order on each connection. The delay is a propagation delay, not a
// queue: data read while earlier data waits is forwarded at its own time,
// so pipelined commands are not delayed further.
//
// What it does not: the delay is a lower bound. The proxy's goroutines,
// Go's timers and the scheduler add to it (tens of microseconds on an idle
// machine, more on a busy one), and the proxy's CPU is spent in the process
// that started it. Bandwidth is not limited. Data in flight when a spike
// starts or ends is forwarded at once rather than with either delay.
//
// toxiproxy's own latency toxic counts whole milliseconds; the proxy uses
// a toxic of its own that counts microseconds, registered with toxiproxy
// (its registry is process-wide) by New.
package latencyproxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// delayType is the name under which the delay toxic is registered.
const delayType = "tollgate_delay"

// Names of the toxics, in each direction of the proxy.
const (
	baseToxic  = "latency"
	spikeToxic = "spike"
)

// errClosed is the error of a spike asked of a closed proxy.
var errClosed = errors.New("latencyproxy: closed")

// streams are toxiproxy's two directions: client to server and back.
var streams = [...]string{"upstream", "downstream"}

// Proxy is a running proxy. Its methods are safe to call concurrently.
type Proxy struct {
	addr    string
	latency time.Duration
	proxy   *toxiproxy.Proxy

	mu     sync.Mutex
	spike  time.Duration
	closed bool
}

// New starts a proxy on a free port of 127.0.0.1 that forwards every
// connection to target and adds latency to each round trip, half in each
// direction. The caller must Close it.
func New(target string, latency time.Duration) (*Proxy, error) {
	if latency < 0 {
		return nil, fmt.Errorf("latencyproxy: negative latency %v", latency)
	}
	toxics.Register(delayType, new(delayToxic))
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	px := toxiproxy.NewProxy(server, "latency", "127.0.0.1:0", target)
	if err := px.Start(); err != nil {
		return nil, fmt.Errorf("latencyproxy: starting a proxy to %s: %w", target, err)
	}
	p := &Proxy{addr: px.Listen, latency: latency, proxy: px}
	if err := p.addToxics(baseToxic, latency); err != nil {
		px.Stop()
		return nil, err
	}
	return p, nil
}

// Start is New for a test: it fails t if the proxy does not start, and
// closes it in t.Cleanup.
func Start(t testing.TB, target string, latency time.Duration) *Proxy {
	t.Helper()
	p, err := New(target, latency)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's host:port, the address to give the client.
func (p *Proxy) Addr() string { return p.addr }

// Latency returns the latency every round trip is given, the spike's
// included.
func (p *Proxy) Latency() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency + p.spike
}

// Spike adds extra to the latency of every round trip from now on, until
// EndSpike; a spike already on is replaced.
func (p *Proxy) Spike(extra time.Duration) error {
	if extra <= 0 {
		return fmt.Errorf("latencyproxy: spike of %v, want a positive one", extra)
	}
	if err := p.EndSpike(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	if err := p.addToxics(spikeToxic, extra); err != nil {
		return err
	}
	p.spike = extra
	return nil
}

// EndSpike ends the spike, if one is on.
func (p *Proxy) EndSpike() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.spike == 0 || p.closed {
		return nil
	}
	for _, s := range streams {
		if err := p.proxy.Toxics.RemoveToxic(context.Background(), spikeToxic+"_"+s); err != nil {
			return fmt.Errorf("latencyproxy: ending the spike: %w", err)
		}
	}
	p.spike = 0
	return nil
}

// Close stops the proxy and closes its connections; it may be called
// again.
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.proxy.Stop()
	}
}

// addToxics adds a delay toxic named name in each direction, each delaying
// by half of latency (the downstream one by the odd microsecond).
func (p *Proxy) addToxics(name string, latency time.Duration) error {
	us := latency.Microseconds()
	half := [...]int64{us / 2, us - us/2}
	for i, s := range streams {
		body := fmt.Sprintf(`{"name": %q, "type": %q, "stream": %q, "toxicity": 1, "attributes": {"microseconds": %d}}`,
			name+"_"+s, delayType, s, half[i])
		if _, err := p.proxy.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			return fmt.Errorf("latencyproxy: adding %s latency of %v: %w", s, latency, err)
		}
	}
	return nil
}

// delayToxic holds every chunk until Microseconds have passed since the
// proxy read it (or since the toxic before it in the chain released it),
// as toxiproxy's latency toxic does in whole milliseconds. toxiproxy
// makes a new one for each toxic added, and only reads its fields after.
type delayToxic struct {
	Microseconds int64 `json:"microseconds"`
}

var (
	_ toxics.Toxic         = (*delayToxic)(nil)
	_ toxics.BufferedToxic = (*delayToxic)(nil)
)

// GetBufferSize lets chunks queue while earlier ones wait, so that a
// delay does not become a queue.
func (t *delayToxic) GetBufferSize() int { return 1024 }

// Pipe forwards the chunks of stub once each one's time has come. On an
// interrupt (a toxic added or removed) it forwards a waiting chunk at once
// and returns, as toxiproxy's toxics must.
func (t *delayToxic) Pipe(stub *toxics.ToxicStub) {
	delay := time.Duration(t.Microseconds) * time.Microsecond
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			due := c.Timestamp.Add(delay)
			if !waitUntil(stub, timer, due) {
				stub.Output <- c // never drop data
				return
			}
			// The next toxic's delay runs from here, so delays add up.
			c.Timestamp = due
			stub.Output <- c
		}
	}
}

// timerSlack is how late a Go timer may fire: the runtime waits for timers
// in whole milliseconds while the process is idle, so a 250 µs timer fires
// after about a millisecond.
const timerSlack = 2 * time.Millisecond

// waitUntil waits until due, or reports false at once on an interrupt of
// stub. It waits on timer (interruptibly) up to timerSlack before due, and
// sleeps the rest in the kernel, which is precise to tens of microseconds;
// an interrupt during that last part waits for it.
func waitUntil(stub *toxics.ToxicStub, timer *time.Timer, due time.Time) bool {
	if long := time.Until(due) - timerSlack; long > 0 {
		timer.Reset(long)
		select {
		case <-timer.C:
		case <-stub.Interrupt:
			return false
		}
	}
	if rest := time.Until(due); rest > 0 {
		sleepPrecisely(rest)
	}
	return true
}
