package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// TestPenaltyKey checks what a penalty keeps in Redis: nothing for an
// admitted hit, a key that lives only as long as the Retry-After after a
// plain rejection, and after a cooldown the state until the client is
// forgiven, as algorithm.Penalty.Expiry says (plus the second of slack of
// a client clock).
func TestPenaltyKey(t *testing.T) {
	for _, start := range []func(testing.TB) redistest.Deployment{redistest.StandaloneDeployment, redistest.ClusterDeployment} {
		d := start(t)
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			client := d.Client(t)
			clock := storetest.NewClock(time.UnixMicro(1_750_000_000_000_000)) // a whole second
			s := newStore(t, redis.Options{Client: client, KeyPrefix: "pk", Now: clock.Now})
			h := hit("client", limit(algorithm.FixedWindow, 1, time.Second), 1)
			h.Penalty = &algorithm.Penalty{Cooldown: 2_000_000, Factor: 2, Max: 10_000_000, ForgiveAfter: 5_000_000}
			counter, _ := redis.Key("pk", &h)
			key := counter + "|p" // the counter's hash tag, so its slot
			pttl := func() time.Duration {
				t.Helper()
				d, err := client.PTTL(ctx, key).Result()
				if err != nil {
					t.Fatalf("PTTL: %v", err)
				}
				return d
			}
			if v := apply(t, s, h); !v[0].Allowed {
				t.Fatalf("first hit: %+v", v[0])
			}
			if n, _ := client.Exists(ctx, key).Result(); n != 0 {
				t.Fatal("an admitted hit left a penalty key")
			}
			// A plain rejection: Retry-After 1 s, so the state lasts 1 s
			// (and the second of slack).
			if v := apply(t, s, h); v[0].Allowed || v[0].Penalized {
				t.Fatalf("second hit: %+v", v[0])
			}
			if d := pttl(); d <= time.Second || d > 2*time.Second {
				t.Fatalf("after a plain rejection the penalty key lives %v, want (1 s, 2 s]", d)
			}
			// A strike: a 2 s cooldown, forgiven 5 s after it ends.
			clock.Advance(100 * time.Millisecond)
			if v := apply(t, s, h); !v[0].Penalized || v[0].RetryAfter != 2*time.Second {
				t.Fatalf("third hit: %+v", v[0])
			}
			if d := pttl(); d <= 7*time.Second || d > 8*time.Second {
				t.Fatalf("after a cooldown the penalty key lives %v, want (7 s, 8 s]", d)
			}
			val, err := client.Get(ctx, key).Result()
			if err != nil {
				t.Fatalf("GET: %v", err)
			}
			if want := "1750000002100000:0:2000000:1750000002100000"; val != want {
				t.Fatalf("penalty state %q, want %q (until:strikes:last:blocked)", val, want)
			}
		})
	}
}

// TestPenaltyCrossSlot: on a cluster, a batch across two slots where one
// group rejects and the other admits a hit under a penalty. The admitting
// group, which holds the penalty's record, is refunded like any other,
// and its hit reports its counter after the refund; then a cooldown in one
// group makes the other group's hits refunded too.
func TestPenaltyCrossSlot(t *testing.T) {
	d := redistest.ClusterDeployment(t)
	s := newStore(t, redis.Options{Client: d.Client(t), KeyPrefix: "pc"})
	// Shards "a" and "b" hash to slots 15495 and 3300: two groups.
	full := hit("b", limit(algorithm.FixedWindow, 1, time.Hour), 1)
	apply(t, s, full)
	l := limit(algorithm.FixedWindow, 5, time.Hour)
	penalized := hit("a", l, 1)
	penalized.Penalty = &algorithm.Penalty{Cooldown: 60_000_000, Factor: 2, Max: 600_000_000, ForgiveAfter: 3_600_000_000}
	got := apply(t, s, penalized, full)
	if !got[0].Allowed || got[0].Remaining != 5 || got[1].Allowed {
		t.Fatalf("batch = %+v, want the penalized hit refunded (5 left) and the full counter rejecting", got)
	}
	if v := apply(t, s, penalized)[0]; !v.Allowed || v.Remaining != 4 {
		t.Fatalf("after the refund: %+v, want admitted with 4 left", v)
	}
	// Fill a's counter, then a plain rejection and a strike: a cooldown.
	apply(t, s, hit("a", l, 4))
	if v := apply(t, s, penalized)[0]; v.Allowed || v.Penalized {
		t.Fatalf("plain rejection: %+v", v)
	}
	free := hit("b", limit(algorithm.FixedWindow, 5, time.Minute), 1)
	got = apply(t, s, free, penalized)
	if !got[0].Allowed || got[0].Remaining != 5 || !got[1].Penalized || got[1].RetryAfter != time.Minute {
		t.Fatalf("batch = %+v, want the free hit refunded (5 left) and a one-minute cooldown", got)
	}
}
