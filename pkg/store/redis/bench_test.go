package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/integration/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// BenchmarkApply decides one token-bucket hit per Apply against a
// standalone server, from one goroutine (the latency an idle store adds)
// and from many, with batching on and off. It reports round trips per
// decision beside ns/op and allocs/op.
func BenchmarkApply(b *testing.B) {
	d := standalone(b)
	for _, window := range []time.Duration{0, 200 * time.Microsecond, -1} {
		for _, parallel := range []int{0, 16} {
			name := fmt.Sprintf("window=%v/serial", window)
			if parallel > 0 {
				name = fmt.Sprintf("window=%v/goroutines=%dxGOMAXPROCS", window, parallel)
			}
			b.Run(name, func(b *testing.B) {
				mp, sum := metricsReader(b)
				s := newStore(b, redis.Options{Client: d.client(b), BatchWindow: window, MeterProvider: mp})
				l := limit(algorithm.TokenBucket, 1e9, time.Second)
				apply(b, s, hit("warm-up", l, 1))
				trips0 := sum("tollgate_redis_round_trips")
				var worker atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				if parallel == 0 {
					hits := []store.Hit{hit("serial", l, 1)}
					v := make([]algorithm.Verdict, 1)
					for range b.N {
						if err := s.Apply(context.Background(), hits, v); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					b.SetParallelism(parallel)
					b.RunParallel(func(pb *testing.PB) {
						hits := []store.Hit{hit("w"+strconv.FormatInt(worker.Add(1), 10), l, 1)}
						v := make([]algorithm.Verdict, 1)
						for pb.Next() {
							if err := s.Apply(context.Background(), hits, v); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				b.StopTimer()
				b.ReportMetric(float64(sum("tollgate_redis_round_trips")-trips0)/float64(b.N), "roundtrips/op")
			})
		}
	}
}

// TestMemoryPerKey creates a million token buckets of a typical descriptor
// through the store and requires that Redis spend at most 100 bytes of
// used_memory on each, where Redis allocates 24-byte blocks as its bundled
// jemalloc does. A jemalloc built with a 16-byte quantum (Debian's system
// library) rounds each of a key's two 24-byte dict entries (keyspace and
// expires) up to 32 bytes; there the bound is 116.
//
// Per key: two dict entries (2×24), the key's sds (1+len+1, rounded to a
// size class), about 2×8 bytes of dict tables at a million keys, and no
// value object: the value is a shared integer (see apply.lua).
func TestMemoryPerKey(t *testing.T) {
	if testing.Short() {
		t.Skip("creates a million keys")
	}
	const (
		keys  = 1_000_000
		batch = 1000
	)
	srv := redistest.StartStandalone(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	s := newStore(t, redis.Options{Client: client})
	l := limit(algorithm.TokenBucket, 10, time.Hour) // a key lives 6 minutes
	apply(t, s, hit("warm-up", l, 1))
	before := redistest.UsedMemory(t, srv.Addr)
	hits := make([]store.Hit, batch)
	v := make([]algorithm.Verdict, batch)
	start := time.Now()
	for i := 0; i < keys; i += batch {
		for j := range hits {
			user := fmt.Sprintf("u%07d", i+j)
			hits[j] = store.Hit{Domain: "api", Entries: []store.Entry{{Key: "user", Value: user}}, Shard: user, Limit: l, Cost: 1}
		}
		if err := s.Apply(context.Background(), hits, v); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	if n := client.DBSize(context.Background()).Val(); n != keys+1 {
		t.Fatalf("DBSIZE = %d, want %d", n, keys+1)
	}
	perKey := float64(redistest.UsedMemory(t, srv.Addr)-before) / keys
	key, _ := redis.Key(redis.DefaultKeyPrefix, &hits[0])
	bound := 100.0
	if !hasSizeClass(t, client, 24) {
		bound += 2 * 8
	}
	t.Logf("%d token buckets like %s (%d bytes) in %v: %.1f bytes of used_memory each (bound %.0f)",
		keys, key, len(key), took.Round(time.Millisecond), perKey, bound)
	if perKey > bound {
		t.Fatalf("%.1f bytes per key, want at most %.0f", perKey, bound)
	}
}

// hasSizeClass reports whether the server's jemalloc has a bin of size
// bytes, from MEMORY MALLOC-STATS.
func hasSizeClass(t *testing.T, client *goredis.Client, size int) bool {
	t.Helper()
	stats, err := client.Do(context.Background(), "MEMORY", "MALLOC-STATS").Text()
	if err != nil {
		t.Fatalf("MEMORY MALLOC-STATS: %v", err)
	}
	_, bins, ok := strings.Cut(stats, "bins:")
	if !ok {
		t.Fatalf("MEMORY MALLOC-STATS has no bins:\n%s", stats)
	}
	for _, line := range strings.Split(bins, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 2 {
			break
		}
		if f[0] == strconv.Itoa(size) {
			return true
		}
	}
	return false
}
