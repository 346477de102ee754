package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// TestClear checks that Clear deletes the key of a counter of every
// algorithm and of its penalty state, on a standalone server and on a
// cluster (with counters in several slots in one call), so that an
// exhausted and penalized client is admitted again at once.
func TestClear(t *testing.T) {
	kinds := []algorithm.Kind{algorithm.TokenBucket, algorithm.FixedWindow, algorithm.SlidingWindowCounter, algorithm.SlidingWindowLog}
	for _, start := range []func(testing.TB) redistest.Deployment{redistest.StandaloneDeployment, redistest.ClusterDeployment} {
		d := start(t)
		t.Run(d.Name, func(t *testing.T) {
			client := d.Client(t)
			s := newStore(t, redis.Options{Client: client, KeyPrefix: "c"})
			var hits []store.Hit
			for i, kind := range kinds {
				h := hit(fmt.Sprintf("client%d", i), limit(kind, 2, time.Hour), 1)
				h.Penalty = &algorithm.Penalty{Cooldown: 60_000_000, Factor: 2, Max: 600_000_000, ForgiveAfter: 3_600_000_000}
				hits = append(hits, h)
			}
			for _, h := range hits {
				for i, want := range []bool{true, true, false} {
					if v := apply(t, s, h); v[0].Allowed != want {
						t.Fatalf("%v hit %d: %+v, want admitted %v", h.Limit.Kind, i, v[0], want)
					}
				}
				// Sent within its Retry-After: a strike past a
				// tolerance of 0.
				if v := apply(t, s, h); !v[0].Penalized {
					t.Fatalf("%v hit within Retry-After: %+v, want penalized", h.Limit.Kind, v[0])
				}
			}
			if err := s.Clear(context.Background(), hits); err != nil {
				t.Fatalf("Clear: %v", err)
			}
			for _, h := range hits {
				key, _ := redis.Key("c", &h)
				if n, err := client.Exists(context.Background(), key, key+"|p").Result(); err != nil || n != 0 {
					t.Errorf("%v: %d of keys %s and its penalty exist, %v", h.Limit.Kind, n, key, err)
				}
				if v := apply(t, s, h); !v[0].Allowed || v[0].Remaining != 1 {
					t.Errorf("%v after Clear: %+v, want admitted with 1 left", h.Limit.Kind, v[0])
				}
			}
		})
	}
}
