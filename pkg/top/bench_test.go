package top

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// BenchmarkObserve measures the cost of counting one decided descriptor:
// of a value already counted, of one of a thousand skewed values, and of
// a new value every time (a flood, which copies every value once).
func BenchmarkObserve(b *testing.B) {
	values := make([][]descriptor.Entry, 1<<16)
	rng := rand.New(rand.NewPCG(1, 1))
	zipf := rand.NewZipf(rng, 1.1, 1, 999)
	for i := range values {
		values[i] = []descriptor.Entry{{Key: "api_key", Value: "key-" + strconv.FormatUint(zipf.Uint64(), 10)}, {Key: "path", Value: "/search"}}
	}
	cases := []struct {
		name  string
		value func(i int) []descriptor.Entry
	}{
		{"one value", func(int) []descriptor.Entry { return values[0] }},
		{"skewed values", func(i int) []descriptor.Entry { return values[i&(len(values)-1)] }},
		{"new values", func(i int) []descriptor.Entry {
			return []descriptor.Entry{{Key: "api_key", Value: "flood-" + strconv.Itoa(i)}}
		}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			r, err := New(Options{})
			if err != nil {
				b.Fatal(err)
			}
			h := r.Rule("api", "api_key/path", "per_key", perMinute)
			now := time.Now()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				h.Observe(now, bc.value(i), 1, i&15 == 0)
				i++
			}
		})
	}
}

// BenchmarkObserveParallel measures counting on every core at once into
// one rule identity: the contention of its mutex.
func BenchmarkObserveParallel(b *testing.B) {
	r, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	h := r.Rule("api", "api_key", "per_key", perMinute)
	now := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			h.Observe(now, client(strconv.Itoa(i&255)), 1, false)
			i++
		}
	})
}

// BenchmarkFloodMemory floods one rule identity with a million distinct
// values over 65 minutes, so that every interval of every window holds
// a full summary, and reports the heap the recorder holds afterwards:
// the most memory a rule identity takes, which a larger flood would not
// change.
func BenchmarkFloodMemory(b *testing.B) {
	for _, k := range []int{DefaultCapacity, 256} {
		b.Run("K="+strconv.Itoa(k), func(b *testing.B) {
			for b.Loop() {
				before := heapInUse()
				r, err := New(Options{Capacity: k})
				if err != nil {
					b.Fatal(err)
				}
				h := r.Rule("api", "api_key", "per_key", perMinute)
				e := make([]descriptor.Entry, 1)
				const flood = 1_000_000
				for i := range flood {
					now := t0.Add(time.Duration(i) * 65 * time.Minute / flood)
					e[0] = descriptor.Entry{Key: "api_key", Value: "flood-" + strconv.Itoa(i)}
					h.Observe(now, e, 1, i&1 == 0)
				}
				r.now = func() time.Time { return t0.Add(65 * time.Minute) }
				r.Snapshot() // finish the last slot
				after := heapInUse()
				b.ReportMetric(float64(after-before), "bytes/rule")
				runtime.KeepAlive(r)
			}
		})
	}
}

// heapInUse returns the bytes of live heap objects after a collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
