package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/metrictest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// BenchmarkApply decides one token-bucket hit per Apply against a
// standalone server, from one goroutine (the latency an idle store adds)
// and from many, with batching on and off. Beside ns/op and allocs/op it
// reports, per decision, round trips, script calls, and the CPU time of
// Redis: redis-us/op for the whole server (network included), script-us/op
// for the script calls alone (INFO commandstats).
func BenchmarkApply(b *testing.B) {
	d := redistest.StandaloneDeployment(b)
	for _, window := range []time.Duration{0, 200 * time.Microsecond, -1} {
		for _, parallel := range []int{0, 16} {
			name := fmt.Sprintf("window=%v/serial", window)
			if parallel > 0 {
				name = fmt.Sprintf("window=%v/goroutines=%dxGOMAXPROCS", window, parallel)
			}
			b.Run(name, func(b *testing.B) {
				client := d.Client(b)
				mp, sum := metrictest.New(b)
				s := newStore(b, redis.Options{Client: client, BatchWindow: window, MeterProvider: mp})
				l := limit(algorithm.TokenBucket, 1e9, time.Second)
				apply(b, s, hit("warm-up", l, 1))
				m := startMeasuring(b, client, sum)
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
				m.report(b)
			})
		}
	}
}

// BenchmarkApplyKeys is the load of the Redis-store issue's closed-loop
// scenario: 64 goroutines, each deciding one token-bucket hit (1000 per
// second) on a random one of 10 000 keys per Apply, through the default
// batcher. See BenchmarkApply for the metrics.
func BenchmarkApplyKeys(b *testing.B) {
	const keys = 10_000
	d := redistest.StandaloneDeployment(b)
	client := d.Client(b)
	mp, sum := metrictest.New(b)
	s := newStore(b, redis.Options{Client: client, MeterProvider: mp})
	l := limit(algorithm.TokenBucket, 1000, time.Second)
	names := make([]string, keys)
	for i := range names {
		names[i] = "k" + strconv.Itoa(i)
	}
	apply(b, s, hit("warm-up", l, 1))
	m := startMeasuring(b, client, sum)
	var seed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 0))
		hits := make([]store.Hit, 1)
		v := make([]algorithm.Verdict, 1)
		for pb.Next() {
			hits[0] = hit(names[rng.IntN(keys)], l, 1)
			if err := s.Apply(context.Background(), hits, v); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	m.report(b)
}

// BenchmarkPair sends, per decision, what envoyproxy/ratelimit sends for
// one fixed-window hit: INCRBY and EXPIRE of the key of the current second,
// in one go-redis pipeline (one round trip), so that the cost of its pair of
// commands is measured by the same method as BenchmarkApply's (serial) and
// BenchmarkApplyKeys's (64 goroutines, 10 000 keys). Beside redis-us/op it
// reports commands-us/op, the time INFO commandstats gives INCRBY and
// EXPIRE; scriptcalls/op is 0 and roundtrips/op 1 by construction.
func BenchmarkPair(b *testing.B) {
	const keys = 10_000
	names := make([]string, keys)
	for i := range names {
		names[i] = "k" + strconv.Itoa(i)
	}
	for _, parallel := range []int{0, 64} {
		name := "serial"
		if parallel > 0 {
			name = fmt.Sprintf("goroutines=%d", parallel)
		}
		b.Run(name, func(b *testing.B) {
			client := redistest.StandaloneDeployment(b).Client(b)
			pair := func(ctx context.Context, key string) error {
				now := time.Now().Unix()
				k := "ratelimit_bench_" + key + "_" + strconv.FormatInt(now, 10)
				_, err := client.Pipelined(ctx, func(p goredis.Pipeliner) error {
					p.IncrBy(ctx, k, 1)
					p.Expire(ctx, k, time.Second)
					return nil
				})
				return err
			}
			if err := pair(context.Background(), "warm-up"); err != nil {
				b.Fatal(err)
			}
			var trips atomic.Int64
			m := startMeasuring(b, client, func(name string) int64 {
				if name == "tollgate_redis_round_trips" {
					return trips.Load()
				}
				return 0
			})
			commands0 := commandCPU(b, client, "cmdstat_incrby", "cmdstat_expire")
			var seed atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			if parallel == 0 {
				for range b.N {
					if err := pair(context.Background(), "serial"); err != nil {
						b.Fatal(err)
					}
					trips.Add(1)
				}
			} else {
				b.SetParallelism(max(1, parallel/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					rng := rand.New(rand.NewPCG(seed.Add(1), 0))
					for pb.Next() {
						if err := pair(context.Background(), names[rng.IntN(keys)]); err != nil {
							b.Error(err)
							return
						}
						trips.Add(1)
					}
				})
			}
			b.StopTimer()
			m.report(b)
			b.ReportMetric((commandCPU(b, client, "cmdstat_incrby", "cmdstat_expire")-commands0)/float64(b.N), "commands-us/op")
		})
	}
}

// commandCPU returns the time INFO commandstats gives the named commands
// (its cmdstat_ lines), in µs.
func commandCPU(b *testing.B, client goredis.UniversalClient, names ...string) float64 {
	b.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatalf("INFO: %v", err)
	}
	var usec float64
	for _, line := range strings.Split(info, "\r\n") {
		name, value, _ := strings.Cut(line, ":")
		if !slices.Contains(names, name) {
			continue
		}
		for _, field := range strings.Split(value, ",") {
			if k, v, _ := strings.Cut(field, "="); k == "usec" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO %s: %v", line, err)
				}
				usec += f
			}
		}
	}
	return usec
}

// measuring holds the counters a benchmark reports per decision.
type measuring struct {
	client         goredis.UniversalClient
	sum            func(string) int64
	trips, calls   int64
	cpu, scriptCPU float64
}

// startMeasuring reads the counters at the start of a benchmark.
func startMeasuring(b *testing.B, client goredis.UniversalClient, sum func(string) int64) *measuring {
	m := &measuring{client: client, sum: sum}
	m.trips, m.calls = sum("tollgate_redis_round_trips"), sum("tollgate_redis_script_calls")
	m.cpu, m.scriptCPU = redisCPU(b, client)
	return m
}

// report reports the counters' growth per decision (b.N).
func (m *measuring) report(b *testing.B) {
	cpu, scriptCPU := redisCPU(b, m.client)
	n := float64(b.N)
	b.ReportMetric(float64(m.sum("tollgate_redis_round_trips")-m.trips)/n, "roundtrips/op")
	b.ReportMetric(float64(m.sum("tollgate_redis_script_calls")-m.calls)/n, "scriptcalls/op")
	b.ReportMetric((cpu-m.cpu)/n, "redis-us/op")
	b.ReportMetric((scriptCPU-m.scriptCPU)/n, "script-us/op")
}

// redisCPU returns the CPU time Redis has used, in µs, and the time spent
// in script calls (EVALSHA and FCALL), from INFO.
func redisCPU(b *testing.B, client goredis.UniversalClient) (cpu, script float64) {
	b.Helper()
	info, err := client.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatalf("INFO: %v", err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		name, value, _ := strings.Cut(line, ":")
		switch name {
		case "used_cpu_sys", "used_cpu_user":
			f, err := strconv.ParseFloat(value, 64)
			if err != nil {
				b.Fatalf("INFO %s: %v", line, err)
			}
			cpu += f * 1e6
		case "cmdstat_evalsha", "cmdstat_fcall":
			for _, field := range strings.Split(value, ",") {
				if k, v, _ := strings.Cut(field, "="); k == "usec" {
					f, err := strconv.ParseFloat(v, 64)
					if err != nil {
						b.Fatalf("INFO %s: %v", line, err)
					}
					script += f
				}
			}
		}
	}
	return cpu, script
}

// TestMemoryPerKey creates a million token buckets of a typical descriptor
// through the store and requires that Redis spend at most 116 bytes of
// used_memory on each, where Redis allocates 24-byte blocks as its bundled
// jemalloc does. A jemalloc built with a 16-byte quantum (Debian's system
// library) rounds each of a key's two 24-byte dict entries (keyspace and
// expires) up to 32 bytes; there the bound is 132.
//
// Per key: two dict entries (2×24), the key's sds (1+len+1, rounded to a
// size class), about 2×8 bytes of dict tables at a million keys, and the
// value: the TAT, an integer too large to be shared, in a 16-byte object.
// (Keeping the TAT in the key's expiry instead saved the object, but read
// it with PEXPIRETIME, which Redis 6.2 lacks.)
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
	bound := 116.0
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

// BenchmarkApplyPenalty is BenchmarkApply's serial case, unbatched, for a
// token-bucket hit under a penalty, admitted every time: the script then
// reads the counter's penalty state beside the counter (one more key, one
// more GET, no write), on the general path instead of the one-hit path.
func BenchmarkApplyPenalty(b *testing.B) {
	d := redistest.StandaloneDeployment(b)
	for _, penalized := range []bool{false, true} {
		b.Run(fmt.Sprintf("penalty=%t", penalized), func(b *testing.B) {
			client := d.Client(b)
			mp, sum := metrictest.New(b)
			s := newStore(b, redis.Options{Client: client, BatchWindow: -1, MeterProvider: mp})
			h := hit("serial", limit(algorithm.TokenBucket, 1e9, time.Second), 1)
			if penalized {
				h.Penalty = &algorithm.Penalty{Tolerance: 3, Cooldown: 10e6, Factor: 2, Max: 900e6, ForgiveAfter: 3600e6}
			}
			apply(b, s, h)
			m := startMeasuring(b, client, sum)
			hits := []store.Hit{h}
			v := make([]algorithm.Verdict, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := s.Apply(context.Background(), hits, v); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			m.report(b)
		})
	}
}
