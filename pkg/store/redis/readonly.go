package redis

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"

	goredis "github.com/redis/go-redis/v9"
)

// Demoted masters.
//
// A failover that moves an address to the new master without the client's
// knowledge (a Kubernetes Service, a DNS name, a cloud provider's primary
// endpoint, a proxy) leaves the connections already open to the old master,
// which now answers every write with READONLY. go-redis closes a connection
// that got READONLY, but only that one: every other pooled connection fails
// one call before it is closed in turn, and a few failed decisions in a
// row open a circuit breaker in front of the store. So the clients
// NewClient builds for single and sentinel carry a
// dropStale hook: the first READONLY makes every connection dialled before
// it stale, and the pool closes a stale connection when it would hand it
// out, so the next call dials the address again and reaches the new
// master. Calls in flight are never cut. The call that met READONLY is sent
// again by the store, once (see run): the server refused it before
// changing anything, so it cannot count twice.
//
// The pool learns of staleness through its health check of an idle
// connection (go-redis's connCheck), which reads the socket through
// syscall.Conn: a stale connection's SyscallConn fails.
// TestFailoverBehindAnAddress holds go-redis to that. A Cluster client
// needs none of it: it reloads the slots on READONLY and follows MOVED.

// errStale fails the health check of a connection dialled before a
// READONLY.
var errStale = errors.New("connection dialled before a READONLY reply: the server may have been demoted")

// dropStale is the go-redis hook of a demoted master (see above).
type dropStale struct {
	// epoch counts the READONLY replies seen; a connection dialled in an
	// earlier epoch is stale.
	epoch atomic.Uint64
}

var _ goredis.Hook = (*dropStale)(nil)

// DialHook marks each new connection with the epoch its dial began in.
func (d *dropStale) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		epoch := d.epoch.Load()
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &epochConn{Conn: conn, stale: &d.epoch, epoch: epoch}, nil
	}
}

// ProcessHook starts a new epoch when a command is answered READONLY.
func (d *dropStale) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && goredis.IsReadOnlyError(err) {
			d.epoch.Add(1)
		}
		return err
	}
}

// ProcessPipelineHook starts a new epoch when a command of a pipeline is
// answered READONLY.
func (d *dropStale) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil {
			for _, cmd := range cmds {
				if goredis.IsReadOnlyError(cmd.Err()) {
					d.epoch.Add(1)
					break
				}
			}
		}
		return err
	}
}

// epochConn is a connection and the epoch it was dialled in.
type epochConn struct {
	net.Conn
	stale *atomic.Uint64 // the hook's epoch
	epoch uint64
}

// SyscallConn fails for a stale connection, so that the pool's health
// check closes it; for any other it is the connection's own, or, where the
// connection has none to give (TLS, whose records the check must not
// read), one whose reads report nothing to read, as the check would find
// without it.
func (c *epochConn) SyscallConn() (syscall.RawConn, error) {
	if c.epoch < c.stale.Load() {
		return nil, errStale
	}
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return quietRawConn{}, nil
}

// quietRawConn is a syscall.RawConn that calls no function: the health
// check it is given to finds nothing to read and passes.
type quietRawConn struct{}

func (quietRawConn) Control(func(fd uintptr)) error    { return nil }
func (quietRawConn) Read(func(fd uintptr) bool) error  { return nil }
func (quietRawConn) Write(func(fd uintptr) bool) error { return nil }
