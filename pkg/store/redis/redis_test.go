package redis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/metrictest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// t0 is the vectors' start, 2025-06-15T13:46:40Z.
var t0 = time.UnixMicro(1_750_000_000_000_000)

// newStore returns a Store closed at the end of the test. With
// TOLLGATE_REDIS_EVALSHA set, the store calls the script with EVALSHA even
// where the server has Redis Functions, so that every test can run on
// either path.
func newStore(t testing.TB, opts redis.Options) *redis.Store {
	t.Helper()
	if os.Getenv("TOLLGATE_REDIS_EVALSHA") != "" {
		opts = redis.ScriptsOnly(opts)
	}
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

// apply applies one batch and fails the test on an error.
func apply(t testing.TB, s store.Store, hits ...store.Hit) []algorithm.Verdict {
	t.Helper()
	v := make([]algorithm.Verdict, len(hits))
	if err := s.Apply(context.Background(), hits, v); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return v
}

func limit(kind algorithm.Kind, requests int64, period time.Duration) algorithm.Limit {
	return algorithm.Limit{Kind: kind, Requests: requests, Period: period.Microseconds()}
}

// hit is a hit on descriptor [{"k", value}] of domain "test", sharded by
// its value.
func hit(value string, l algorithm.Limit, cost int64) store.Hit {
	return store.Hit{Domain: "test", Entries: []store.Entry{{Key: "k", Value: value}}, Shard: value, Limit: l, Cost: cost}
}

// TestVectors runs the shared algorithm and lease vectors against a
// standalone server and a cluster, with batching on and off, calling the
// script as a function (FCALL) and as a script (EVALSHA): the Lua code must
// reproduce package algorithm exactly, Reserve and Return included.
func TestVectors(t *testing.T) {
	for _, start := range []func(testing.TB) redistest.Deployment{redistest.StandaloneDeployment, redistest.ClusterDeployment} {
		d := start(t)
		for _, batch := range []struct {
			name   string
			window time.Duration
		}{{"batched", 0}, {"unbatched", -1}} {
			for _, call := range []string{"fcall", "evalsha"} {
				t.Run(d.Name+"/"+batch.name+"/"+call, func(t *testing.T) {
					open := func(t *testing.T, clock *storetest.Clock, prefix string) *redis.Store {
						opts := redis.Options{
							Client:      d.Client(t),
							KeyPrefix:   prefix + batch.name[:1] + call[:1],
							Now:         clock.Now,
							BatchWindow: batch.window,
						}
						if call == "evalsha" {
							opts = redis.ScriptsOnly(opts)
						}
						return newStore(t, opts)
					}
					storetest.Run(t, func(t *testing.T, clock *storetest.Clock) store.Store { return open(t, clock, "v") })
					storetest.RunLeases(t, func(t *testing.T, clock *storetest.Clock) storetest.Leaser { return open(t, clock, "l") })
				})
			}
		}
	}
}

func TestNewRejects(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = client.Close() })
	tests := []struct {
		name string
		opts redis.Options
		want string
	}{
		{"no client", redis.Options{}, "no client"},
		{"open brace", redis.Options{Client: client, KeyPrefix: "a{b"}, `key prefix "a{b" holds a brace, which would change the keys' hash tag`},
		{"close brace", redis.Options{Client: client, KeyPrefix: "}"}, `key prefix "}" holds a brace, which would change the keys' hash tag`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := redis.New(tt.opts)
			if err == nil {
				_ = s.Close()
				t.Fatal("New succeeded")
			}
			if err.Error() != tt.want {
				t.Fatalf("New: %v, want %s", err, tt.want)
			}
		})
	}
}

// TestState checks how each algorithm's counter is stored: the type of its
// one key, a TTL that ends when the counter is empty again, and the key
// gone once a refund empties it. The server's clock decides (Now is nil).
func TestState(t *testing.T) {
	d := redistest.StandaloneDeployment(t)
	client := d.Client(t)
	s := newStore(t, redis.Options{Client: client})
	ctx := context.Background()
	tests := []struct {
		limit   algorithm.Limit
		typ     string
		maxPTTL time.Duration // at most the time until the counter is empty
	}{
		{limit(algorithm.TokenBucket, 10, 10*time.Second), "string", time.Second},
		// A fixed window ends on the epoch's grid, so a short one could end,
		// and its key expire, between the write and the checks.
		{limit(algorithm.FixedWindow, 10, 30*24*time.Hour), "string", 30 * 24 * time.Hour},
		{limit(algorithm.SlidingWindowCounter, 10, 10*time.Second), "string", 20 * time.Second},
		{limit(algorithm.SlidingWindowLog, 10, 10*time.Second), "zset", 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.limit.Kind.String(), func(t *testing.T) {
			h := hit("state", tt.limit, 1)
			key, _ := redis.Key(redis.DefaultKeyPrefix, &h)
			apply(t, s, h)
			if typ := client.Type(ctx, key).Val(); typ != tt.typ {
				t.Errorf("TYPE %s = %q, want %q", key, typ, tt.typ)
			}
			// A TTL is rounded up to a whole ms.
			pttl := client.PTTL(ctx, key).Val()
			if pttl <= 0 || pttl > tt.maxPTTL+time.Millisecond {
				t.Errorf("PTTL %s = %v, want in (0, %v]", key, pttl, tt.maxPTTL+time.Millisecond)
			}
			if tt.limit.Kind == algorithm.SlidingWindowLog {
				if n := client.ZCard(ctx, key).Val(); n != 1 {
					t.Errorf("ZCARD = %d, want 1", n)
				}
				apply(t, s, hit("state", tt.limit, 3))
				if n := client.ZCard(ctx, key).Val(); n != 4 {
					t.Errorf("ZCARD after 3 more = %d, want 4: one member per unit", n)
				}
				apply(t, s, hit("state", tt.limit, -3))
			}
			apply(t, s, hit("state", tt.limit, -1))
			if n := client.Exists(ctx, key).Val(); n != 0 {
				t.Errorf("EXISTS after the refund = %d, want 0: an empty counter is deleted", n)
			}
		})
	}
}

// TestTokenBucketIsOneInteger checks that a token bucket is one key of
// one integer, its theoretical arrival time (TAT) in µs, on either clock,
// with a TTL that only governs cleanup: it ends a ms of slack after the TAT
// on the server's clock, a second after it on a client's.
func TestTokenBucketIsOneInteger(t *testing.T) {
	d := redistest.StandaloneDeployment(t)
	client := d.Client(t)
	ctx := context.Background()
	l := limit(algorithm.TokenBucket, 10, time.Second)
	t.Run("server clock", func(t *testing.T) {
		s := newStore(t, redis.Options{Client: client, KeyPrefix: "srv"})
		var at int64
		for range 3 {
			var err error
			if at, err = s.ApplyAt(ctx, []store.Hit{hit("u1", l, 1)}, make([]algorithm.Verdict, 1)); err != nil {
				t.Fatal(err)
			}
		}
		key := onlyKey(t, client, "srv*")
		tat, err := client.Get(ctx, key).Int64()
		if err != nil || tat <= at || tat > at+300_000 {
			t.Fatalf("value = %d (%v), want the TAT in (%d, %d]: three tokens of 100 ms", tat, err, at, at+300_000)
		}
		if enc := client.ObjectEncoding(ctx, key).Val(); enc != "int" {
			t.Errorf("OBJECT ENCODING = %q, want int", enc)
		}
		if pttl := client.PTTL(ctx, key).Val(); pttl <= 0 || pttl > 301*time.Millisecond {
			t.Errorf("PTTL = %v, want in (0, 301ms]: up to 300ms plus 1ms of slack", pttl)
		}
	})
	// The layout before Redis 6.2 was supported kept the TAT in the key's
	// expiry and the µs it was rounded by in the value; such a key is read
	// to a ms.
	t.Run("earlier layout", func(t *testing.T) {
		s := newStore(t, redis.Options{Client: client, KeyPrefix: "old"})
		h := hit("u1", l, 0)
		key, _ := redis.Key("old", &h)
		// Three tokens of 100 ms taken: the TAT is 300 ms away.
		if err := client.Set(ctx, key, 250, 300*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		if v := apply(t, s, h)[0]; v.Remaining != 7 {
			t.Errorf("check of a bucket with 3 tokens taken: %+v, want Remaining 7", v)
		}
	})
	t.Run("client clock", func(t *testing.T) {
		clock := storetest.NewClock(t0)
		s := newStore(t, redis.Options{Client: client, KeyPrefix: "cli", Now: clock.Now})
		for range 3 {
			apply(t, s, hit("u1", l, 1))
		}
		key := onlyKey(t, client, "cli*")
		if v, want := client.Get(ctx, key).Val(), strconv.FormatInt(t0.UnixMicro()+300_000, 10); v != want {
			t.Errorf("value = %q, want the TAT %s", v, want)
		}
		if enc := client.ObjectEncoding(ctx, key).Val(); enc != "int" {
			t.Errorf("OBJECT ENCODING = %q, want int", enc)
		}
		if pttl := client.PTTL(ctx, key).Val(); pttl <= time.Second || pttl > 1300*time.Millisecond {
			t.Errorf("PTTL = %v, want 300ms plus 1s of slack", pttl)
		}
	})
}

// onlyKey returns the one key matching pattern.
func onlyKey(t *testing.T, client goredis.UniversalClient, pattern string) string {
	t.Helper()
	keys := client.Keys(context.Background(), pattern).Val()
	if len(keys) != 1 {
		t.Fatalf("keys %s = %q, want one", pattern, keys)
	}
	return keys[0]
}

// TestIdleKeysExpire checks that Redis drops a counter once it is empty
// again, with no help from the store.
func TestIdleKeysExpire(t *testing.T) {
	d := redistest.StandaloneDeployment(t)
	client := d.Client(t)
	s := newStore(t, redis.Options{Client: client, KeyPrefix: "idle"})
	ctx := context.Background()
	hits := []store.Hit{
		hit("a", limit(algorithm.TokenBucket, 100, 100*time.Millisecond), 1), // full after 1 ms
		hit("b", limit(algorithm.FixedWindow, 5, 50*time.Millisecond), 1),
		hit("c", limit(algorithm.SlidingWindowCounter, 5, 20*time.Millisecond), 1),
		hit("d", limit(algorithm.SlidingWindowLog, 5, 50*time.Millisecond), 1),
	}
	apply(t, s, hits...)
	if err := polltest.Poll(5*time.Second, polltest.Interval, nil, func() error {
		if keys := client.Keys(ctx, "idle*").Val(); len(keys) > 0 {
			return fmt.Errorf("keys %q still there", keys)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestNoScript checks that Apply recovers when Redis loses the script.
func TestNoScript(t *testing.T) {
	for _, start := range []func(testing.TB) redistest.Deployment{redistest.StandaloneDeployment, redistest.ClusterDeployment} {
		d := start(t)
		for _, window := range []time.Duration{0, -1} {
			t.Run(fmt.Sprintf("%s/window=%v", d.Name, window), func(t *testing.T) {
				client := d.Client(t)
				mp, sum := metrictest.New(t)
				s := newStore(t, redis.Options{Client: client, BatchWindow: window, MeterProvider: mp, KeyPrefix: "ns" + strconv.Itoa(int(window))})
				l := limit(algorithm.FixedWindow, 10, time.Hour)
				for i := range 3 {
					// Redis loses both when it restarts.
					if err := client.ScriptFlush(context.Background()).Err(); err != nil {
						t.Fatalf("SCRIPT FLUSH: %v", err)
					}
					if err := flushFunctions(client); err != nil {
						t.Fatalf("FUNCTION FLUSH: %v", err)
					}
					v := apply(t, s, hit("a", l, 1), hit("b", l, 1))
					if want := int64(10 - 1 - i); v[0].Remaining != want || v[1].Remaining != want {
						t.Fatalf("after flush %d: %+v, want Remaining %d", i, v, want)
					}
				}
				if loads := sum("tollgate_redis_script_loads"); loads < 3 {
					t.Fatalf("script loads = %d, want a load after each of 3 flushes", loads)
				}
			})
		}
	}
}

// flushFunctions drops every function library, on every master of a
// cluster.
func flushFunctions(client goredis.UniversalClient) error {
	ctx := context.Background()
	if cc, ok := client.(*goredis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			return c.FunctionFlush(ctx).Err()
		})
	}
	return client.FunctionFlush(ctx).Err()
}

// TestConcurrentHitsNeverExceed hits one counter from many goroutines and
// checks that exactly the limit is admitted.
func TestConcurrentHitsNeverExceed(t *testing.T) {
	const (
		workers  = 16
		attempts = 25
		max      = 100
	)
	for _, start := range []func(testing.TB) redistest.Deployment{redistest.StandaloneDeployment, redistest.ClusterDeployment} {
		d := start(t)
		for _, kind := range []algorithm.Kind{algorithm.TokenBucket, algorithm.FixedWindow, algorithm.SlidingWindowCounter, algorithm.SlidingWindowLog} {
			for _, window := range []time.Duration{0, -1} {
				t.Run(fmt.Sprintf("%s/%v/window=%v", d.Name, kind, window), func(t *testing.T) {
					s := newStore(t, redis.Options{Client: d.Client(t), BatchWindow: window, KeyPrefix: fmt.Sprintf("c%d%d", kind, window)})
					l := limit(kind, max, time.Hour) // no refill while the test runs
					var admitted atomic.Int64
					var wg sync.WaitGroup
					for range workers {
						wg.Go(func() {
							for range attempts {
								v := make([]algorithm.Verdict, 1)
								if err := s.Apply(context.Background(), []store.Hit{hit("one", l, 1)}, v); err != nil {
									t.Errorf("Apply: %v", err)
									return
								}
								if v[0].Allowed {
									admitted.Add(1)
								}
							}
						})
					}
					wg.Wait()
					if n := admitted.Load(); n != max {
						t.Fatalf("admitted %d of %d, want exactly %d", n, workers*attempts, max)
					}
				})
			}
		}
	}
}

// TestCrossSlotRollback checks, on a cluster, that a batch rejected in one
// slot group charges nothing in the others: the admitted hits of other
// groups are refunded and report their counters as they stand.
func TestCrossSlotRollback(t *testing.T) {
	d := redistest.ClusterDeployment(t)
	client := d.Client(t)
	mp, sum := metrictest.New(t)
	s := newStore(t, redis.Options{Client: client, KeyPrefix: "x", MeterProvider: mp})
	// Shards "a" and "b" hash to slots 15495 and 3300: two groups.
	full := hit("b", limit(algorithm.FixedWindow, 1, time.Hour), 1)
	apply(t, s, full)
	for _, kind := range []algorithm.Kind{algorithm.TokenBucket, algorithm.FixedWindow, algorithm.SlidingWindowCounter, algorithm.SlidingWindowLog} {
		t.Run(kind.String(), func(t *testing.T) {
			l := limit(kind, 5, time.Hour)
			first := apply(t, s, hit("a", l, 2))[0]
			soft := hit("a", l, 1)
			soft.Soft = true
			got := apply(t, s, hit("a", l, 1), soft, full)
			if got[2].Allowed {
				t.Fatalf("the full counter admitted: %+v", got[2])
			}
			for i := range 2 {
				if !got[i].Allowed || got[i].Remaining != first.Remaining || got[i].RetryAfter != 0 {
					t.Errorf("hit %d = %+v, want admitted with Remaining %d as before the batch", i, got[i], first.Remaining)
				}
			}
			if check := apply(t, s, hit("a", l, 0))[0]; check.Remaining != first.Remaining || check.ResetAfter > first.ResetAfter {
				t.Errorf("after the rejected batch: %+v, want Remaining %d and ResetAfter at most %v", check, first.Remaining, first.ResetAfter)
			}
		})
	}
	if n := sum("tollgate_redis_refunds"); n != 8 {
		t.Errorf("refunded hits = %d, want 8", n)
	}

	t.Run("failed group", func(t *testing.T) {
		// A key of the wrong type makes the script in b's slot fail.
		broken := hit("b", limit(algorithm.TokenBucket, 5, time.Hour), 1)
		key, _ := redis.Key("x", &broken)
		if err := client.HSet(context.Background(), key, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		l := limit(algorithm.FixedWindow, 5, 2*time.Hour) // a fresh counter in a's slot
		v := make([]algorithm.Verdict, 2)
		err := s.Apply(context.Background(), []store.Hit{hit("a", l, 1), broken}, v)
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Apply = %v, want ErrUnavailable", err)
		}
		if check := apply(t, s, hit("a", l, 0))[0]; check.Remaining != 5 {
			t.Errorf("after the failed batch: %+v, want Remaining 5: the charge refunded", check)
		}
	})
}

// TestCrossSlotConcurrent runs requests that each hit two counters in
// different slots from many goroutines: exactly the smaller limit is
// admitted and, once the rejected requests are refunded, both counters hold
// exactly the admitted requests.
func TestCrossSlotConcurrent(t *testing.T) {
	d := redistest.ClusterDeployment(t)
	s := newStore(t, redis.Options{Client: d.Client(t), KeyPrefix: "xc"})
	a, b := limit(algorithm.FixedWindow, 50, time.Hour), limit(algorithm.FixedWindow, 80, time.Hour)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 15 {
				v := make([]algorithm.Verdict, 2)
				if err := s.Apply(context.Background(), []store.Hit{hit("a", a, 1), hit("b", b, 1)}, v); err != nil {
					t.Errorf("Apply: %v", err)
					return
				}
				if v[0].Allowed && v[1].Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != 50 {
		t.Fatalf("admitted %d requests, want 50", n)
	}
	v := apply(t, s, hit("a", a, 0), hit("b", b, 0))
	if v[0].Remaining != 0 || v[1].Remaining != 30 {
		t.Fatalf("counters after the run: %+v, want 0 and 30 remaining", v)
	}
}

// TestBatching checks that concurrent Applies share round trips when
// batching is on, each round trip one script call that carries the Applies
// as groups, and that each Apply is its own round trip when it is off.
func TestBatching(t *testing.T) {
	d := redistest.StandaloneDeployment(t)
	const (
		workers = 32
		applies = 40
	)
	for _, tt := range []struct {
		window  time.Duration
		batched bool
	}{{0, true}, {200 * time.Microsecond, true}, {-1, false}} {
		t.Run(fmt.Sprintf("window=%v", tt.window), func(t *testing.T) {
			mp, sum := metrictest.New(t)
			s := newStore(t, redis.Options{Client: d.Client(t), BatchWindow: tt.window, MeterProvider: mp, KeyPrefix: "b" + tt.window.String()})
			l := limit(algorithm.TokenBucket, 1e6, time.Second)
			// Once the script is surely loaded, count from zero.
			apply(t, s, hit("warm-up", l, 1))
			trips0, calls0, groups0 := sum("tollgate_redis_round_trips"), sum("tollgate_redis_script_calls"), sum("tollgate_redis_batch_size")
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for range applies {
						v := make([]algorithm.Verdict, 1)
						if err := s.Apply(context.Background(), []store.Hit{hit(strconv.Itoa(w), l, 1)}, v); err != nil {
							t.Errorf("Apply: %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
			trips, calls, groups := sum("tollgate_redis_round_trips")-trips0, sum("tollgate_redis_script_calls")-calls0, sum("tollgate_redis_batch_size")-groups0
			t.Logf("%d Applies: %d groups in %d script calls in %d round trips", workers*applies, groups, calls, trips)
			if groups != workers*applies {
				t.Errorf("groups sent = %d, want %d", groups, workers*applies)
			}
			if calls != trips {
				t.Errorf("script calls = %d in %d round trips, want one per round trip", calls, trips)
			}
			if tt.batched && trips >= groups*3/4 {
				t.Errorf("round trips = %d for %d groups: batching saved under a quarter", trips, groups)
			}
			if !tt.batched && trips != groups {
				t.Errorf("round trips = %d, want one per group (%d) without batching", trips, groups)
			}
		})
	}
}

// TestClose checks that Close waits for the batcher's goroutines, and that
// Apply fails with ErrUnavailable afterwards.
func TestClose(t *testing.T) {
	d := redistest.StandaloneDeployment(t)
	client := d.Client(t)
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	for _, window := range []time.Duration{0, -1} {
		t.Run(fmt.Sprintf("window=%v", window), func(t *testing.T) {
			before := runtime.NumGoroutine()
			s, err := redis.New(redis.Options{Client: client, BatchWindow: window})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					v := make([]algorithm.Verdict, 1)
					if err := s.Apply(context.Background(), []store.Hit{hit("c", limit(algorithm.FixedWindow, 100, time.Minute), 1)}, v); err != nil {
						t.Errorf("Apply: %v", err)
					}
				})
			}
			wg.Wait()
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			// go-redis dials pooled connections on short-lived goroutines of
			// its own, so the count may take a moment to settle.
			if err := polltest.Poll(2*time.Second, polltest.Interval, nil, func() error {
				if n := runtime.NumGoroutine(); n > before {
					return fmt.Errorf("%d goroutines after Close, %d before New", n, before)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			err = s.Apply(context.Background(), []store.Hit{hit("c", limit(algorithm.FixedWindow, 100, time.Minute), 1)}, make([]algorithm.Verdict, 1))
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("Apply after Close = %v, want ErrUnavailable", err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

// TestUnavailable checks that a dead or frozen Redis gives errors that wrap
// store.ErrUnavailable, and that a caller's deadline ends Apply promptly.
func TestUnavailable(t *testing.T) {
	srv := redistest.StartStandalone(t)
	l := limit(algorithm.FixedWindow, 10, time.Minute)
	for _, tt := range []struct {
		name   string
		window time.Duration
		client func() goredis.UniversalClient
	}{
		{"batched", 0, nil},
		{"unbatched", -1, nil},
		// The batcher answers the caller even if the client would wait on.
		{"batched, client without deadlines", 0, func() goredis.UniversalClient {
			return goredis.NewClient(&goredis.Options{Addr: srv.Addr})
		}},
	} {
		t.Run("frozen/"+tt.name, func(t *testing.T) {
			var client goredis.UniversalClient
			if tt.client != nil {
				client = tt.client()
			} else {
				var err error
				if client, err = redis.NewClient(redis.ClientConfig{Addrs: []string{srv.Addr}}); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { _ = client.Close() })
			s := newStore(t, redis.Options{Client: client, BatchWindow: tt.window, KeyPrefix: tt.name})
			apply(t, s, hit("u", l, 1))
			srv.Stop()
			defer srv.Continue()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := s.Apply(ctx, []store.Hit{hit("u", l, 1)}, make([]algorithm.Verdict, 1))
			took := time.Since(start)
			if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Apply = %v, want ErrUnavailable and DeadlineExceeded", err)
			}
			if took > 500*time.Millisecond {
				t.Errorf("Apply took %v with a 50ms deadline", took)
			}
			srv.Continue()
			// Redis runs the abandoned call once it resumes if it was sent
			// before the deadline (Remaining 8), and never twice.
			if v := apply(t, s, hit("u", l, 0)); v[0].Remaining < 8 {
				t.Errorf("after the server resumed: %+v, want Remaining 8 or 9", v[0])
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
		t.Cleanup(func() { _ = client.Close() })
		s := newStore(t, redis.Options{Client: client})
		err := s.Apply(context.Background(), []store.Hit{hit("u", l, 1)}, make([]algorithm.Verdict, 1))
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Apply = %v, want ErrUnavailable", err)
		}
	})
	t.Run("mismatched verdicts", func(t *testing.T) {
		client := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = client.Close() })
		s := newStore(t, redis.Options{Client: client})
		err := s.Apply(context.Background(), []store.Hit{hit("u", l, 1)}, nil)
		if err == nil || err.Error() != "redis store: 0 verdicts for 1 hits" {
			t.Fatalf("Apply = %v, want the mismatch reported", err)
		}
	})
}
