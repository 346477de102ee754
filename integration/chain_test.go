package integration

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/store/cached"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// The tests of the store chain without the app (leasefleet_test.go,
// leasefaults_test.go): cached stores over circuit breakers over Redis
// stores, on real redis-server processes.

// The Redis store is what package cached leases from.
var _ cached.Leaser = (*redis.Store)(nil)

// deployment is a running Redis under test.
type deployment struct {
	name   string
	client func(t testing.TB) goredis.UniversalClient
}

// standalone starts a standalone server.
func standalone(t testing.TB) deployment {
	srv := redistest.StartStandalone(t)
	return deployment{name: "standalone", client: func(t testing.TB) goredis.UniversalClient {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}}
}

// cluster starts a three-master cluster.
func cluster(t testing.TB) deployment {
	cl := redistest.StartCluster(t)
	return deployment{name: "cluster", client: func(t testing.TB) goredis.UniversalClient {
		c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}}
}

// newStore returns a Redis store closed at the end of the test.
func newStore(t testing.TB, opts redis.Options) *redis.Store {
	t.Helper()
	s, err := redis.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}
