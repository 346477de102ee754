package integration

import (
	"testing"

	"github.com/tollgatehq/tollgate/pkg/store/cached"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// The tests of the store chain without the app (leasefleet_test.go,
// leasefaults_test.go): cached stores over circuit breakers over Redis
// stores, on real redis-server processes.

// The Redis store is what package cached leases from.
var _ cached.Leaser = (*redis.Store)(nil)

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
