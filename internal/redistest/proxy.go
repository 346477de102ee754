package redistest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP forwarder on 127.0.0.1 that stands for an address a
// failover moves to the new master without the client's knowledge: a
// Kubernetes Service, a DNS name, a cloud provider's primary endpoint. Each
// connection it accepts goes to the target of that moment; connections
// already made stay with the server they reached, as they do through such
// an address. It stops in t.Cleanup, closing every connection.
type Proxy struct {
	// Addr is the proxy's host:port, the address to give the client.
	Addr string

	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
	closed bool
}

// StartProxy starts a Proxy forwarding to target.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: listening for a proxy: %v", err)
	}
	p := &Proxy{Addr: lis.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		lis.Close()
		p.mu.Lock()
		p.closed = true
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.forward(conn, &wg) })
		}
	})
	return p
}

// Retarget sends the connections accepted from now on to target.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// track remembers c for the cleanup, or reports that the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// forget closes c and drops it from the cleanup; c may be closed already.
func (p *Proxy) forget(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.Close()
	delete(p.conns, c)
}

// forward connects conn to the current target and copies both ways until
// either side closes; then it closes both.
func (p *Proxy) forward(conn net.Conn, wg *sync.WaitGroup) {
	defer p.forget(conn)
	if !p.track(conn) {
		return
	}
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	up, err := net.DialTimeout("tcp", target, commandTimeout)
	if err != nil {
		return
	}
	defer p.forget(up)
	if !p.track(up) {
		return
	}
	done := make(chan struct{}, 2)
	copyTo := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // an error ends the pair as a close does
		done <- struct{}{}
	}
	wg.Go(func() { copyTo(up, conn) })
	wg.Go(func() { copyTo(conn, up) })
	<-done
	// One side closed: close both, which ends the other copy.
	p.forget(conn)
	p.forget(up)
	<-done
}
