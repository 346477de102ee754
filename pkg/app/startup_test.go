package app_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// downDeployment is a Redis deployment started, then stopped whole, so
// that tollgate starts before it.
type downDeployment struct {
	typ, masterName string
	addrs           []string
	// up starts every process again, on the same ports, and waits until
	// the deployment serves.
	up func()
	// get reads a key, of a slot, where the deployment's master of it
	// holds it.
	get func(key string, slot int) any
}

// TestStartsBeforeRedis starts tollgate while its Redis deployment is down
// whole (standalone; Sentinel's master, replica and sentinels; every
// Cluster master): tollgate must start, listen and answer by the rules'
// failure modes, then, once the deployment is started again, count in it
// with no restart of its own (decisions made by Redis, exact, the counter
// in Redis) and hear the fleet channel.
func TestStartsBeforeRedis(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) downDeployment
	}{
		{"standalone", func(t *testing.T) downDeployment {
			srv := redistest.StartStandalone(t)
			srv.Kill()
			return downDeployment{typ: redis.TypeSingle, addrs: []string{srv.Addr}, up: srv.Restart, get: func(key string, _ int) any { return srv.Do("GET", key) }}
		}},
		{"sentinel", func(t *testing.T) downDeployment {
			st := redistest.StartSentinel(t)
			all := append([]*redistest.Server{st.Master, st.Replica}, st.Sentinels...)
			for _, s := range all {
				s.Kill()
			}
			return downDeployment{typ: redis.TypeSentinel, masterName: st.MasterName, addrs: st.Addrs(),
				up: func() {
					for _, s := range all {
						s.Restart()
					}
				},
				get: func(key string, _ int) any { return st.Master.Do("GET", key) }}
		}},
		{"cluster", func(t *testing.T) downDeployment {
			c := redistest.StartCluster(t)
			for _, m := range c.Masters {
				m.Kill()
			}
			return downDeployment{typ: redis.TypeCluster, addrs: c.Addrs(),
				up: func() {
					for _, m := range c.Masters {
						m.Restart()
					}
					c.WaitHealthy(t)
				},
				get: func(key string, slot int) any { return c.MasterOfSlot(slot).Do("GET", key) }}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.start(t)
			a := apptest.Start(t, overrideDir(t), apptest.Options{Settings: func(s *app.Settings) {
				s.Store, s.Redis.Type, s.Redis.Addrs, s.Redis.MasterName = "redis", d.typ, d.addrs, d.masterName
				s.Failure.StoreTimeout, s.Failure.BreakerOpenTime = time.Second, 200*time.Millisecond
			}})
			client := dialApp(t, a)
			if resp := send(t, client, "o", descriptor.Entry{Key: "tenant", Value: "before"}); resp.OverallCode != rlsv3.RateLimitResponse_OK || !degraded(resp) {
				t.Fatalf("with Redis down: %v, degraded %v; want OK by failure mode open", resp.OverallCode, degraded(resp))
			}
			if code := apptest.Status(t, http.MethodGet, "http://"+a.HTTPAddr+"/readyz", ""); code != http.StatusOK {
				t.Errorf("/readyz with Redis down: %d, want 200 (the rules answer)", code)
			}

			d.up()
			after := descriptor.Entry{Key: "tenant", Value: "after"}
			polltest.Eventually(t, 20*time.Second, func() bool {
				return !degraded(send(t, client, "o", descriptor.Entry{Key: "tenant", Value: "probe"}))
			}, "tollgate still answers without Redis")
			for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
				if resp := send(t, client, "o", after); resp.OverallCode != want || degraded(resp) {
					t.Fatalf("decision %d with Redis up: %v, degraded %v; want %v from Redis", i+1, resp.OverallCode, degraded(resp), want)
				}
			}
			key, slot := redis.Key(redis.DefaultKeyPrefix, &store.Hit{Domain: "o", Entries: []store.Entry{{Key: after.Key, Value: after.Value}}, Shard: after.Value,
				Limit: algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 2, Period: time.Hour.Microseconds()}})
			if got, _ := d.get(key, slot).(string); !strings.HasSuffix(got, ":2") {
				t.Errorf("Redis holds %q at %s, want a count of 2", got, key)
			}
			polltest.Eventually(t, 10*time.Second, a.FleetListening, "tollgate does not hear the fleet channel")
		})
	}
}

// degraded reports whether resp was made by failure modes.
func degraded(resp *rlsv3.RateLimitResponse) bool {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == limiter.HeaderPolicy && h.GetValue() == limiter.PolicyDegraded {
			return true
		}
	}
	return false
}
