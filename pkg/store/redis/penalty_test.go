package redis_test

import (
	"context"
	"testing"
	"time"

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
	for _, start := range []func(testing.TB) deployment{standalone, cluster} {
		d := start(t)
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			client := d.client(t)
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
