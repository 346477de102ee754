package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

var t0 = time.UnixMicro(1_750_000_000_000_000)

func TestVectors(t *testing.T) {
	tests := []struct {
		name string
		opts memory.Options
	}{
		{"defaults", memory.Options{}},
		{"one shard", memory.Options{Shards: 1}},
		{"many shards", memory.Options{Shards: 4096}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, clock *storetest.Clock) store.Store {
				opts := tt.opts
				opts.Now = clock.Now
				return memory.New(opts)
			})
		})
	}
}

func tokenBucket(requests int64, period time.Duration) algorithm.Limit {
	return algorithm.Limit{Kind: algorithm.TokenBucket, Requests: requests, Period: period.Microseconds()}
}

func fixedWindow(requests int64, period time.Duration) algorithm.Limit {
	return algorithm.Limit{Kind: algorithm.FixedWindow, Requests: requests, Period: period.Microseconds()}
}

func hit(value string, l algorithm.Limit, cost int64) store.Hit {
	return store.Hit{Domain: "test", Entries: []store.Entry{{Key: "k", Value: value}}, Shard: value, Limit: l, Cost: cost}
}

// apply applies one batch and fails the test on an error.
func apply(t testing.TB, s *memory.Store, hits ...store.Hit) []algorithm.Verdict {
	t.Helper()
	v := make([]algorithm.Verdict, len(hits))
	if err := s.Apply(context.Background(), hits, v); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return v
}

func TestApplyRejectsMismatchedVerdicts(t *testing.T) {
	s := memory.New(memory.Options{})
	err := s.Apply(context.Background(), []store.Hit{hit("a", fixedWindow(1, time.Second), 1)}, nil)
	if err == nil || err.Error() != "memory store: 0 verdicts for 1 hits" {
		t.Fatalf("Apply = %v, want the mismatch reported", err)
	}
}

// TestFullCounterIsDropped checks that a counter back at full capacity is
// deleted at once rather than left for the sweep.
func TestFullCounterIsDropped(t *testing.T) {
	tests := []struct {
		name  string
		limit algorithm.Limit
	}{
		{"token bucket", tokenBucket(5, time.Second)},
		{"fixed window", fixedWindow(5, time.Second)},
		{"sliding-window log", algorithm.Limit{Kind: algorithm.SlidingWindowLog, Requests: 5, Period: 1e6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := storetest.NewClock(t0)
			s := memory.New(memory.Options{Shards: 1, Now: clock.Now})
			apply(t, s, hit("a", tt.limit, 2))
			if n := s.Len(); n != 1 {
				t.Fatalf("Len after a hit = %d, want 1", n)
			}
			apply(t, s, hit("a", tt.limit, -2))
			if n := s.Len(); n != 0 {
				t.Fatalf("Len after the refund = %d, want 0", n)
			}
			apply(t, s, hit("b", tt.limit, 0), hit("c", tt.limit, -1))
			if n := s.Len(); n != 0 {
				t.Fatalf("Len after a check and a refund on fresh keys = %d, want 0", n)
			}
		})
	}
}

// TestSweepDropsExpired checks that Applies on a live counter drop expired
// counters of every algorithm from the shards they touch.
func TestSweepDropsExpired(t *testing.T) {
	limits := []algorithm.Limit{
		tokenBucket(10, time.Second),
		fixedWindow(10, time.Second),
		{Kind: algorithm.SlidingWindowCounter, Requests: 10, Period: 1e6},
		{Kind: algorithm.SlidingWindowLog, Requests: 10, Period: 1e6},
	}
	clock := storetest.NewClock(t0)
	s := memory.New(memory.Options{Shards: 1, Now: clock.Now})
	for i := range 400 {
		apply(t, s, hit(strconv.Itoa(i), limits[i%len(limits)], 1))
	}
	if n := s.Len(); n != 400 {
		t.Fatalf("Len = %d, want 400", n)
	}
	// Every counter above is empty again within two seconds.
	clock.Advance(2 * time.Second)
	live := tokenBucket(1000, time.Hour)
	for range 5000 {
		apply(t, s, hit("live", live, 1))
		if s.Len() == 1 {
			return
		}
	}
	t.Fatalf("Len = %d after 5000 Applies, want only the live counter left", s.Len())
}

// TestMaxKeys checks that a flood of unique descriptors never holds more
// than MaxKeys counters.
func TestMaxKeys(t *testing.T) {
	tests := []struct {
		name string
		opts memory.Options
		max  int
	}{
		{"one shard", memory.Options{Shards: 1, MaxKeys: 100}, 100},
		{"16 shards", memory.Options{Shards: 16, MaxKeys: 1000}, 1000},
		{"more shards than keys", memory.Options{Shards: 64, MaxKeys: 10}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := storetest.NewClock(t0)
			tt.opts.Now = clock.Now
			s := memory.New(tt.opts)
			for i := range 20 * tt.max {
				apply(t, s, hit(strconv.Itoa(i), tokenBucket(1, time.Minute), 1),
					hit(strconv.Itoa(i), fixedWindow(1, time.Minute), 1))
				if n := s.Len(); n > tt.max {
					t.Fatalf("after %d hits Len = %d, want at most %d", i+1, n, tt.max)
				}
			}
		})
	}
}

// TestEvictionOrder checks that a full shard evicts expired counters
// first, then the counter expiring soonest, keeping the long-lived one.
func TestEvictionOrder(t *testing.T) {
	clock := storetest.NewClock(t0)
	s := memory.New(memory.Options{Shards: 1, MaxKeys: 4, Now: clock.Now})
	long := tokenBucket(1, time.Hour) // one hit keeps it for an hour
	short := tokenBucket(1, time.Second)
	apply(t, s, hit("long", long, 1))
	apply(t, s, hit("a", short, 1), hit("b", short, 1), hit("c", short, 1))

	// a, b and c expire; adding d evicts all three, not the long counter.
	clock.Advance(2 * time.Second)
	apply(t, s, hit("d", short, 1))
	if n := s.Len(); n != 2 {
		t.Fatalf("Len = %d, want 2: the expired counters evicted together", n)
	}

	// Nothing has expired now: each new counter evicts the one expiring
	// soonest, never the long-lived one.
	for i := range 50 {
		clock.Advance(time.Millisecond)
		apply(t, s, hit(strconv.Itoa(i), short, 1))
	}
	if v := apply(t, s, hit("long", long, 0)); v[0].Allowed {
		t.Fatalf("the long-lived counter was evicted: a check now admits: %+v", v[0])
	}
	if n := s.Len(); n != 4 {
		t.Fatalf("Len = %d, want 4", n)
	}
}

// TestConcurrentBatches runs batches that span shards from many goroutines
// and checks that a shared counter admits exactly its limit and that
// rejected batches charge nothing (run with -race as well).
func TestConcurrentBatches(t *testing.T) {
	const (
		workers = 8
		batches = 400
		limit   = 1000
	)
	s := memory.New(memory.Options{Shards: 16, Now: func() time.Time { return t0 }})
	shared := fixedWindow(limit, time.Hour)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for b := range batches {
				// The per-worker counters allow 200 hits; once they are spent
				// their rejection must keep the shared counter untouched.
				hits := []store.Hit{
					hit(fmt.Sprint("own-", w, "-", b%7), fixedWindow(200/7+1, time.Hour), 1),
					hit("shared", shared, 1),
					hit(fmt.Sprint("other-", w), fixedWindow(200, time.Hour), 1),
				}
				v := apply(t, s, hits...)
				if v[0].Allowed && v[1].Allowed && v[2].Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// Each worker gets at most 200 admitted batches: 8·200 = 1600 attempts
	// on a shared limit of 1000.
	if got := admitted.Load(); got != limit {
		t.Fatalf("%d batches admitted, want exactly the shared limit %d", got, limit)
	}
	v := apply(t, s, hit("shared", shared, 0))
	if v[0].Allowed || v[0].Remaining != 0 {
		t.Fatalf("shared counter after the run: %+v, want exhausted", v[0])
	}
}

// TestFootprint checks the memory budget of a token-bucket counter.
func TestFootprint(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a million counters")
	}
	if perKey := footprint(t, 1_000_000); perKey > 150 {
		t.Fatalf("%.1f bytes per token-bucket counter, want at most 150", perKey)
	}
}

// footprint returns the heap bytes per token-bucket counter of a store
// holding n of them.
func footprint(t testing.TB, n int) float64 {
	hits := make([]store.Hit, n)
	for i := range hits {
		hits[i] = hit("user-"+strconv.Itoa(i), tokenBucket(100, time.Minute), 1)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// Room to spare: shards fill unevenly, and no counter may be evicted.
	s := memory.New(memory.Options{MaxKeys: 2 * n, Now: func() time.Time { return t0 }})
	v := make([]algorithm.Verdict, 1)
	for i := range hits {
		if err := s.Apply(context.Background(), hits[i:i+1], v); err != nil || !v[0].Allowed {
			t.Fatalf("Apply: %v, %+v", err, v[0])
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := s.Len(); got != n {
		t.Fatalf("Len = %d, want %d", got, n)
	}
	runtime.KeepAlive(hits)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// requestHits builds hits the way a request does: descriptor values freshly
// formatted into memory the goroutine owns, so the benchmark measures the
// store rather than cache misses on a large table of prepared hits.
type requestHits struct {
	buf  [3][24]byte
	ent  [3][1]store.Entry
	hits [3]store.Hit
}

func (r *requestHits) set(i int, user uint64, l algorithm.Limit) {
	b := strconv.AppendUint(append(r.buf[i][:0], "user-"...), user, 10)
	r.ent[i][0] = store.Entry{Key: "k", Value: unsafe.String(&b[0], len(b))}
	r.hits[i] = store.Hit{Domain: "test", Entries: r.ent[i][:], Shard: r.ent[i][0].Value, Limit: l, Cost: 1}
}

// fill creates counters user-0 … user-(n-1).
func fill(b *testing.B, s *memory.Store, n int, l algorithm.Limit) {
	var r requestHits
	for i := range n {
		r.set(0, uint64(i), l)
		apply(b, s, r.hits[0])
	}
}

// xorshift advances a per-goroutine pseudo-random sequence.
func xorshift(x uint64) uint64 {
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	return x
}

// BenchmarkApplyTokenBucket measures single-hit token-bucket decisions on
// 100 000 counters, picked at random, from all CPUs.
func BenchmarkApplyTokenBucket(b *testing.B) {
	const keys = 100_000
	l := tokenBucket(100, time.Minute) // every counter stays active
	s := memory.New(memory.Options{})
	fill(b, s, keys, l)
	var seed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		var r requestHits
		var v [1]algorithm.Verdict
		x := seed.Add(0x9e3779b97f4a7c15)
		for pb.Next() {
			x = xorshift(x)
			r.set(0, x%keys, l)
			_ = s.Apply(context.Background(), r.hits[:1], v[:])
		}
	})
	reportRates(b, cpu, "decisions/s")
}

// BenchmarkApplyBatch measures a request with three token-bucket limits,
// usually on three shards, the shape of a descriptor with several
// rate_limits.
func BenchmarkApplyBatch(b *testing.B) {
	const keys = 100_000
	l := tokenBucket(100, time.Minute) // every counter stays active
	s := memory.New(memory.Options{})
	fill(b, s, keys, l)
	var seed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		var r requestHits
		var v [3]algorithm.Verdict
		x := seed.Add(0x9e3779b97f4a7c15)
		for pb.Next() {
			for j := range r.hits {
				x = xorshift(x)
				r.set(j, x%keys, l)
			}
			_ = s.Apply(context.Background(), r.hits[:], v[:])
		}
	})
	reportRates(b, cpu, "batches/s")
}

// reportRates reports operations per second of wall time, and CPU time per
// operation: on a shared machine the wall-clock figures understate what the
// store does with the cores to itself, 1e9/cpu-ns-per-op operations a
// second per core.
func reportRates(b *testing.B, cpuAtStart time.Duration, unit string) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
	if cpu := cpuTime() - cpuAtStart; cpuAtStart > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkFootprint reports the heap bytes per token-bucket counter with
// a million counters.
func BenchmarkFootprint(b *testing.B) {
	var perKey float64
	for range b.N {
		perKey = footprint(b, 1_000_000)
	}
	b.ReportMetric(perKey, "bytes/key")
}

// TestPenaltyStatesAreBounded: penalty states count against MaxKeys and
// are evicted like counters, so a flood of penalized clients cannot
// exhaust memory.
func TestPenaltyStatesAreBounded(t *testing.T) {
	clock := storetest.NewClock(time.UnixMicro(1_750_000_000_000_000))
	s := memory.New(memory.Options{Shards: 1, MaxKeys: 8, Now: clock.Now})
	p := &algorithm.Penalty{Cooldown: 60e6, Factor: 2, Max: 600e6, ForgiveAfter: 3600e6}
	l := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 1, Period: 60e6}
	cooldowns := 0
	for i := range 100 {
		// Admitted, rejected, then a strike: a cooldown of a minute, unless
		// saving one evicted the other (8 entries are few).
		h := store.Hit{Domain: "d", Entries: []store.Entry{{Key: "k", Value: strconv.Itoa(i)}}, Limit: l, Cost: 1, Penalty: p}
		v := make([]algorithm.Verdict, 1)
		for range 3 {
			if err := s.Apply(context.Background(), []store.Hit{h}, v); err != nil {
				t.Fatal(err)
			}
		}
		if v[0].Penalized {
			cooldowns++
		}
		if n, np := s.Len(), memory.Penalties(s); n > 8 || np > 8 {
			t.Fatalf("after %d clients %d entries, %d of them penalty states, want at most 8", i+1, n, np)
		}
	}
	if cooldowns == 0 || memory.Penalties(s) == 0 {
		t.Fatalf("%d cooldowns of 100 clients, %d penalty states kept", cooldowns, memory.Penalties(s))
	}
}
