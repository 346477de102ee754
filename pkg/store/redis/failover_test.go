package redis_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// warmPool leaves n idle connections in client's pool, as n concurrent
// decisions would.
func warmPool(t *testing.T, client *goredis.Client, n int) {
	t.Helper()
	conns := make([]*goredis.Conn, n)
	for i := range conns {
		conns[i] = client.Conn()
		if err := conns[i].Ping(context.Background()).Err(); err != nil {
			t.Fatalf("PING on pooled connection %d: %v", i, err)
		}
	}
	for _, cn := range conns {
		if err := cn.Close(); err != nil {
			t.Fatalf("returning a connection to the pool: %v", err)
		}
	}
	if idle := client.PoolStats().IdleConns; idle < uint32(n) {
		t.Fatalf("%d idle connections in the pool, want %d", idle, n)
	}
}

// freeTCPPort returns a port that was free on 127.0.0.1 a moment ago.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestFailoverBehindAnAddress fails a master over behind an address that
// moves to the new master (as a Kubernetes Service or a DNS name does;
// here a proxy) while the client NewClient builds holds several pooled
// connections to the old master, which then answers every write with
// READONLY. Every decision after the failover must succeed and count on the
// new master: the first READONLY makes the client drop every connection
// dialled before it, and the store sends the refused call again, once, on
// a new connection. Without the drop, one decision per pooled connection
// fails (and five open the breaker); without the second send, the first
// one does. The connections dialled after the failover are reused, not
// dropped in turn: with TLS too, whose connections the pool's health check
// does not read.
func TestFailoverBehindAnAddress(t *testing.T) {
	const pooled = 6
	for _, tc := range []struct {
		name string
		tls  bool
		opts func(redis.Options) redis.Options
	}{
		{"fcall", false, func(o redis.Options) redis.Options { return o }},
		{"evalsha", false, redis.ScriptsOnly},
		{"fcall over TLS", true, func(o redis.Options) redis.Options { return o }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := redis.ClientConfig{PoolSize: 2 * pooled}
			files := writeTLSFiles(t, t.TempDir()) // one certificate for both servers, as for one service
			// start starts a server and returns it with the address its
			// clients reach it at: its port, or with TLS its TLS port
			// (replication keeps to the plain one).
			start := func() (*redistest.Server, string) {
				if !tc.tls {
					srv := redistest.StartStandalone(t)
					return srv, srv.Addr
				}
				port := freeTCPPort(t)
				srv := redistest.StartStandalone(t, redistest.WithArgs(
					"--tls-port", strconv.Itoa(port),
					"--tls-cert-file", files["server.crt"],
					"--tls-key-file", files["server.key"],
					"--tls-ca-cert-file", files["ca.crt"],
					"--tls-auth-clients", "no",
				))
				cfg.TLS, cfg.CAFile, cfg.ServerName = true, files["ca.crt"], "redis.test"
				return srv, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			}
			old, oldAddr := start()
			next, nextAddr := start()
			next.ReplicaOf(old)
			addr := redistest.StartProxy(t, oldAddr)
			cfg.Addrs = []string{addr.Addr}
			uc, err := redis.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = uc.Close() })
			client := uc.(*goredis.Client)
			s := newStore(t, tc.opts(redis.Options{Client: client}))
			l := limit(algorithm.FixedWindow, 1000, time.Hour)
			apply(t, s, hit("before", l, 1))
			warmPool(t, client, pooled)

			next.Promote()
			old.ReplicaOf(next)
			addr.Retarget(nextAddr)

			dials := client.PoolStats().Misses
			after := hit("after", l, 1)
			decideAll(t, s, after, 2*pooled)
			key, _ := redis.Key(redis.DefaultKeyPrefix, &after)
			got, _ := next.Do("GET", key).(string)
			if want := fmt.Sprintf(":%d", 2*pooled); !strings.HasSuffix(got, want) {
				t.Errorf("new master holds %q at %s, want a count of %d", got, key, 2*pooled)
			}
			// One dial for the decisions, maybe one more for the store's
			// own reload of the script; not one per decision.
			if n := client.PoolStats().Misses - dials; n > 2 {
				t.Errorf("%d connections dialled for %d decisions after the failover, want at most 2", n, 2*pooled)
			}
		})
	}
}

// TestSentinelFailover has the sentinels fail the master over while the
// client NewClient builds holds several pooled connections to it. Once the
// old master is a replica, every decision must succeed and count on the new
// master: go-redis hears +switch-master and closes its connections to the
// old one, and the sentinels close the old master's clients; a READONLY
// before either is handled as in TestFailoverBehindAnAddress.
func TestSentinelFailover(t *testing.T) {
	const pooled = 6
	st := redistest.StartSentinel(t)
	uc, err := redis.NewClient(redis.ClientConfig{Type: redis.TypeSentinel, Addrs: st.Addrs(), MasterName: st.MasterName, PoolSize: 2 * pooled})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = uc.Close() })
	client := uc.(*goredis.Client)
	s := newStore(t, redis.Options{Client: client})
	l := limit(algorithm.FixedWindow, 1000, time.Hour)
	apply(t, s, hit("before", l, 1))
	warmPool(t, client, pooled)

	st.Failover()

	after := hit("after", l, 1)
	decideAll(t, s, after, 2*pooled)
	key, _ := redis.Key(redis.DefaultKeyPrefix, &after)
	got, _ := st.Replica.Do("GET", key).(string)
	if want := fmt.Sprintf(":%d", 2*pooled); !strings.HasSuffix(got, want) {
		t.Errorf("new master holds %q at %s, want a count of %d", got, key, 2*pooled)
	}
}

// decideAll makes n decisions of h after a failover and fails the test
// with every one that failed.
func decideAll(t *testing.T, s *redis.Store, h store.Hit, n int) {
	t.Helper()
	var failed []string
	for i := range n {
		v := make([]algorithm.Verdict, 1)
		if err := s.Apply(context.Background(), []store.Hit{h}, v); err != nil {
			failed = append(failed, fmt.Sprintf("decision %d: %v", i+1, err))
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d decisions after the failover failed:\n%s", len(failed), n, strings.Join(failed, "\n"))
	}
}
