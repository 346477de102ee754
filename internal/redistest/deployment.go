package redistest

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// Deployment is a running Redis under test, standalone or a Cluster, and
// a way to reach it, so that one test runs on either.
type Deployment struct {
	Name string
	// Client returns a go-redis client of the deployment, closed when the
	// test ends.
	Client func(t testing.TB) goredis.UniversalClient
}

// StandaloneDeployment starts a standalone server.
func StandaloneDeployment(t testing.TB) Deployment {
	srv := StartStandalone(t)
	return Deployment{Name: "standalone", Client: func(t testing.TB) goredis.UniversalClient {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}}
}

// ClusterDeployment starts a three-master Cluster.
func ClusterDeployment(t testing.TB) Deployment {
	cl := StartCluster(t)
	return Deployment{Name: "cluster", Client: func(t testing.TB) goredis.UniversalClient {
		c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}}
}
