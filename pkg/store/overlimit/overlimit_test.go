package overlimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/metrictest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/store/overlimit"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// backend is a pair of stores on one clock: next, which the cache wraps,
// and ref, which sees the same hits without a cache. calls counts the
// batches next has been asked to decide.
type backend struct {
	next, ref store.Store
	calls     func() int64
}

// counting is a store that counts the batches it passes on.
type counting struct {
	store.Store
	n atomic.Int64
}

func (c *counting) Apply(ctx context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	c.n.Add(1)
	return c.Store.Apply(ctx, hits, verdicts)
}

func memoryBackend(t *testing.T, clock *storetest.Clock) backend {
	c := &counting{Store: memory.New(memory.Options{Now: clock.Now})}
	return backend{next: c, ref: memory.New(memory.Options{Now: clock.Now}), calls: c.n.Load}
}

// redisBackend starts a real redis-server and returns two Redis stores on
// it under different key prefixes; calls reads the first one's
// tollgate_redis_round_trips.
func redisBackend(t *testing.T, clock *storetest.Clock) backend {
	srv := redistest.StartStandalone(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	mp, sum := metrictest.New(t)
	newStore := func(prefix string, opts redis.Options) *redis.Store {
		opts.Client, opts.KeyPrefix, opts.Now = client, prefix, clock.Now
		s, err := redis.New(opts)
		if err != nil {
			t.Fatalf("redis.New: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	next := newStore("a", redis.Options{MeterProvider: mp})
	ref := newStore("b", redis.Options{})
	return backend{next: next, ref: ref, calls: func() int64 { return sum("tollgate_redis_round_trips") }}
}

var limits = []algorithm.Limit{
	{Kind: algorithm.TokenBucket, Requests: 3, Burst: 1, Period: 1_000_000},
	{Kind: algorithm.FixedWindow, Requests: 3, Period: 1_000_000},
	{Kind: algorithm.SlidingWindowCounter, Requests: 3, Period: 1_000_000},
	{Kind: algorithm.SlidingWindowLog, Requests: 3, Period: 1_000_000},
}

func hit(l algorithm.Limit, value string, cost int64) store.Hit {
	return store.Hit{Domain: "d", Entries: []store.Entry{{Key: "k", Value: value}}, Shard: value, Limit: l, Cost: cost}
}

// step is one batch of the differential test.
type step struct {
	advance time.Duration
	hits    []store.Hit
	// local says the batch must be answered without the store, either
	// that it may be answered either way; otherwise the store must be
	// asked.
	local, either bool
}

// TestSameVerdicts drives a cached and an uncached store with the same
// batches on one clock and requires identical verdicts, and that the
// cached one asks its store exactly when the cache cannot answer.
func TestSameVerdicts(t *testing.T) {
	backends := []struct {
		name string
		new  func(*testing.T, *storetest.Clock) backend
	}{
		{"memory", memoryBackend},
		{"redis", redisBackend},
	}
	for _, b := range backends {
		for _, l := range limits {
			t.Run(b.name+"/"+l.Kind.String(), func(t *testing.T) {
				raised := l
				raised.Requests++
				one := func(c int64) []store.Hit { return []store.Hit{hit(l, "a", c)} }
				steps := []step{
					{hits: one(1)}, {hits: one(1)}, {hits: one(1)},
				}
				if l.Kind == algorithm.TokenBucket {
					steps = append(steps, step{hits: one(1)})
				}
				steps = append(steps,
					step{hits: one(1)}, // rejected, remembered
					step{advance: 7 * time.Millisecond, hits: one(1), local: true},
					step{advance: 113 * time.Millisecond, hits: one(1), local: true},
					step{advance: 3 * time.Microsecond, hits: []store.Hit{hit(l, "a", 1), hit(l, "a", 1)}, local: true},
					// A check, a cost above 1, a counter not known and a
					// soft hit on a counter not known all go to the store.
					step{hits: one(0)},
					step{hits: one(2)},
					step{hits: []store.Hit{hit(l, "a", 1), hit(l, "b", 1)}},
					step{hits: []store.Hit{hit(l, "a", 1), func() store.Hit { h := hit(l, "c", 1); h.Soft = true; return h }()}},
					step{hits: one(1), local: true},
					// A raised limit misses, and drops the entry.
					step{hits: []store.Hit{hit(raised, "a", 1)}},
					step{hits: one(1)},
					step{advance: time.Millisecond, hits: one(1), local: true},
					// A refund drops the entry.
					step{hits: one(-1)},
					step{hits: one(1)}, // asked again
					step{hits: one(1), either: true},
					step{advance: time.Millisecond, hits: one(1), local: true},
				)
				// Then walk past the reset in small steps: local until the
				// remembered RetryAfter, then asked again.
				for range 60 {
					steps = append(steps, step{advance: 37 * time.Millisecond, hits: one(1), local: true})
				}
				clock := storetest.NewClock(start)
				be := b.new(t, clock)
				c, err := overlimit.New(be.next, overlimit.Options{MaxBytes: 1 << 20, Now: clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				var until time.Time // when the walk's entry expires
				walk := len(steps) - 60
				sawLocal, sawExpiry := false, false
				for i, st := range steps {
					clock.Advance(st.advance)
					got := make([]algorithm.Verdict, len(st.hits))
					want := make([]algorithm.Verdict, len(st.hits))
					before := be.calls()
					if err := c.Apply(ctx, st.hits, got); err != nil {
						t.Fatalf("step %d: cached Apply: %v", i, err)
					}
					asked := be.calls() - before
					if err := be.ref.Apply(ctx, st.hits, want); err != nil {
						t.Fatalf("step %d: reference Apply: %v", i, err)
					}
					for j := range got {
						if got[j] != want[j] {
							t.Errorf("step %d hit %d: cached verdict %+v, store's %+v", i, j, got[j], want[j])
						}
					}
					local := st.local
					if i >= walk {
						local = clock.Now().Before(until)
						sawLocal = sawLocal || local
						sawExpiry = sawExpiry || !local
					}
					if !st.either && local && asked != 0 {
						t.Errorf("step %d: asked the store %d times, want a local answer", i, asked)
					}
					if !st.either && !local && asked == 0 {
						t.Errorf("step %d: answered locally, want the store asked", i)
					}
					if v := want[0]; asked != 0 && !v.Allowed && v.Remaining == 0 && len(st.hits) == 1 && st.hits[0].Cost == 1 {
						until = clock.Now().Add(v.RetryAfter)
					}
				}
				if !sawLocal || !sawExpiry {
					t.Errorf("walk: local answers %v, expiry %v; want both", sawLocal, sawExpiry)
				}
			})
		}
	}
}

// failing is a store that always fails.
type failing struct{ err error }

func (f failing) Apply(context.Context, []store.Hit, []algorithm.Verdict) error { return f.err }

// TestKnownAnswersWhileStoreFails: a counter known to be over its limit is
// answered while the store fails; others get the store's error.
func TestKnownAnswersWhileStoreFails(t *testing.T) {
	clock := storetest.NewClock(start)
	fail := &failing{}
	var next store.Store = memory.New(memory.Options{Now: clock.Now})
	sw := &switching{Store: next}
	c, err := overlimit.New(sw, overlimit.Options{MaxBytes: 1 << 20, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	l := limits[1]
	ctx := context.Background()
	v := make([]algorithm.Verdict, 1)
	for range 4 {
		if err := c.Apply(ctx, []store.Hit{hit(l, "a", 1)}, v); err != nil {
			t.Fatal(err)
		}
	}
	if v[0].Allowed {
		t.Fatalf("fourth hit admitted: %+v", v[0])
	}
	fail.err = fmt.Errorf("down: %w", store.ErrUnavailable)
	sw.Store = fail
	if err := c.Apply(ctx, []store.Hit{hit(l, "a", 1)}, v); err != nil || v[0].Allowed {
		t.Errorf("known counter: verdict %+v, error %v; want a rejection", v[0], err)
	}
	if err := c.Apply(ctx, []store.Hit{hit(l, "b", 1)}, v); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("unknown counter: error %v, want ErrUnavailable", err)
	}
}

// switching passes calls to whichever store it holds.
type switching struct{ store.Store }

// TestBound floods the cache with distinct over-limit counters and checks
// that its estimated size never exceeds the budget.
func TestBound(t *testing.T) {
	const maxBytes = 64 << 10
	clock := storetest.NewClock(start)
	mp, sum := metrictest.New(t)
	c, err := overlimit.New(memory.New(memory.Options{Now: clock.Now}), overlimit.Options{MaxBytes: maxBytes, Now: clock.Now, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	l := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 1, Period: 60_000_000}
	ctx := context.Background()
	v := make([]algorithm.Verdict, 1)
	const keys = 20_000
	for i := range keys {
		h := []store.Hit{hit(l, fmt.Sprint("client-", i), 1)}
		for range 2 { // admitted, then rejected and remembered
			if err := c.Apply(ctx, h, v); err != nil {
				t.Fatal(err)
			}
		}
		if v[0].Allowed {
			t.Fatalf("key %d: second hit admitted", i)
		}
		if b := c.Bytes(); b > maxBytes {
			t.Fatalf("after %d keys: %d bytes held, budget %d", i+1, b, maxBytes)
		}
	}
	n := c.Len()
	if n == 0 || n >= keys || int64(n)*overlimit.EntryOverhead > maxBytes {
		t.Errorf("%d entries held after %d keys with a budget of %d bytes", n, keys, maxBytes)
	}
	if g := sum("tollgate_overlimit_cache_entries"); g != int64(n) {
		t.Errorf("tollgate_overlimit_cache_entries = %d, want %d", g, n)
	}
	// The newest key is held and answered locally.
	before := sum("tollgate_overlimit_cache_hits")
	if err := c.Apply(ctx, []store.Hit{hit(l, fmt.Sprint("client-", keys-1), 1)}, v); err != nil {
		t.Fatal(err)
	}
	if got := sum("tollgate_overlimit_cache_hits") - before; got != 1 {
		t.Errorf("tollgate_overlimit_cache_hits grew by %d, want 1", got)
	}
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name string
		next store.Store
		opts overlimit.Options
		want string
	}{
		{"no store", nil, overlimit.Options{MaxBytes: 1}, "overlimit: no store"},
		{"zero size", memory.New(memory.Options{}), overlimit.Options{}, "overlimit: cache size 0 is not positive"},
		{"negative size", memory.New(memory.Options{}), overlimit.Options{MaxBytes: -5}, "overlimit: cache size -5 is not positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := overlimit.New(tt.next, tt.opts)
			if err == nil || err.Error() != tt.want {
				t.Errorf("New: error %v, want %q", err, tt.want)
			}
		})
	}
}

// BenchmarkLocal measures a hit answered from the cache.
func BenchmarkLocal(b *testing.B) {
	clock := storetest.NewClock(start)
	c, err := overlimit.New(memory.New(memory.Options{Now: clock.Now}), overlimit.Options{MaxBytes: 1 << 20, Now: clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	l := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 1, Period: 60_000_000}
	hits := []store.Hit{hit(l, "client-1", 1)}
	v := make([]algorithm.Verdict, 1)
	ctx := context.Background()
	for range 2 {
		if err := c.Apply(ctx, hits, v); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Apply(ctx, hits, v); err != nil {
			b.Fatal(err)
		}
	}
	if v[0].Allowed {
		b.Fatal("admitted")
	}
}

// TestVectors runs the store vectors through the cache in front of the
// memory store and of Redis: the cache must change no verdict.
func TestVectors(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T, clock *storetest.Clock) store.Store {
			c, err := overlimit.New(memory.New(memory.Options{Now: clock.Now}), overlimit.Options{MaxBytes: 1 << 20, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			return c
		})
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.StartStandalone(t)
		client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		n := 0
		storetest.Run(t, func(t *testing.T, clock *storetest.Clock) store.Store {
			n++
			r, err := redis.New(redis.Options{Client: client, KeyPrefix: fmt.Sprint("v", n), Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Close() })
			c, err := overlimit.New(r, overlimit.Options{MaxBytes: 1 << 20, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			return c
		})
	})
}

// TestAlwaysChargedReachesStore: a counter cached as over its limit still
// receives every always-charged hit, alone or batched with a hit the cache
// answers, and the store counts its cost.
func TestAlwaysChargedReachesStore(t *testing.T) {
	for _, l := range limits {
		t.Run(l.Kind.String(), func(t *testing.T) {
			clock := storetest.NewClock(start)
			be := memoryBackend(t, clock)
			c, err := overlimit.New(be.next, overlimit.Options{MaxBytes: 1 << 20, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			always := l
			always.Charge = algorithm.ChargeAlways
			apply := func(hits ...store.Hit) ([]algorithm.Verdict, int64) {
				t.Helper()
				v := make([]algorithm.Verdict, len(hits))
				before := be.calls()
				if err := c.Apply(ctx, hits, v); err != nil {
					t.Fatalf("Apply: %v", err)
				}
				return v, be.calls() - before
			}
			// Fill the counter to its capacity, then a rejection is cached.
			if v, _ := apply(hit(l, "a", l.Capacity())); !v[0].Allowed {
				t.Fatalf("filling: %+v", v[0])
			}
			if v, asked := apply(hit(l, "a", 1)); v[0].Allowed || asked != 1 {
				t.Fatalf("first rejection: %+v, asked %d", v[0], asked)
			}
			if _, asked := apply(hit(l, "a", 1)); asked != 0 {
				t.Fatalf("the rejection was not cached: asked %d", asked)
			}
			// Two always-charged hits of cost 1 reach the store, one alone
			// and one batched with the cached counter's admitted hit.
			for _, hits := range [][]store.Hit{
				{hit(always, "a", 1)},
				{hit(l, "a", 1), hit(always, "a", 1)},
			} {
				if v, asked := apply(hits...); asked != 1 || v[len(v)-1].Allowed {
					t.Fatalf("always-charged hit: %+v, asked %d; want the store asked once and a rejection", v, asked)
				}
			}
			// The counter holds capacity+2 (a sliding-window log keeps
			// capacity+1 entries): refunds of that much past it leave it
			// exactly at its limit, where an always-charged check passes,
			// and not one fewer.
			past := int64(2)
			if l.Kind == algorithm.SlidingWindowLog {
				past = 1
			}
			check := hit(always, "a", 0)
			for i := range past {
				if v, _ := apply(check); v[0].Allowed {
					t.Fatalf("check %d past the limit admitted: %+v; an always-charged hit was lost", past-i, v[0])
				}
				if v, _ := apply(hit(l, "a", -1)); !v[0].Allowed {
					t.Fatalf("refund: %+v", v[0])
				}
			}
			if v, _ := apply(check); !v[0].Allowed {
				t.Fatalf("check at the limit rejected: %+v", v[0])
			}
		})
	}
}

// TestPenalizedReachesStore: hits under a penalty always reach the store,
// whose penalty state counts every rejection as a strike and starts the
// cooldown that a cache would have hidden.
func TestPenalizedReachesStore(t *testing.T) {
	penalty := &algorithm.Penalty{Cooldown: 10_000_000, Factor: 2, Max: 60_000_000, ForgiveAfter: 60_000_000}
	for _, l := range limits {
		t.Run(l.Kind.String(), func(t *testing.T) {
			clock := storetest.NewClock(start)
			be := memoryBackend(t, clock)
			c, err := overlimit.New(be.next, overlimit.Options{MaxBytes: 1 << 20, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			apply := func(h store.Hit) (algorithm.Verdict, int64) {
				t.Helper()
				h.Penalty = penalty
				v := make([]algorithm.Verdict, 1)
				before := be.calls()
				if err := c.Apply(context.Background(), []store.Hit{h}, v); err != nil {
					t.Fatalf("Apply: %v", err)
				}
				return v[0], be.calls() - before
			}
			if v, _ := apply(hit(l, "a", l.Capacity())); !v.Allowed {
				t.Fatalf("filling: %+v", v)
			}
			if v, asked := apply(hit(l, "a", 1)); v.Allowed || v.Penalized || asked != 1 {
				t.Fatalf("first rejection: %+v, asked %d; want a plain rejection from the store", v, asked)
			}
			// Sent again at once, within its Retry-After: a strike beyond
			// the tolerance of 0, so a 10 s cooldown.
			want := algorithm.Verdict{Penalized: true, Limit: l.Capacity(), ResetAfter: 10 * time.Second, RetryAfter: 10 * time.Second}
			if v, asked := apply(hit(l, "a", 1)); v != want || asked != 1 {
				t.Fatalf("second rejection: %+v, asked %d; want %+v from the store", v, asked, want)
			}
			if c.Len() != 0 {
				t.Fatalf("%d entries remembered from hits under a penalty", c.Len())
			}
		})
	}
}
