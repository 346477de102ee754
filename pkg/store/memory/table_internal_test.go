package memory

import (
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// TestBucketTable checks the table against a map under random puts,
// removes and sweeps, with keys chosen to collide in few home slots so that
// probe runs wrap around and backward shifts are exercised.
func TestBucketTable(t *testing.T) {
	for _, keySpace := range []uint64{8, 64, 5000} {
		rng := rand.New(rand.NewPCG(keySpace, 1))
		var tab bucketTable
		want := map[uint64]int64{}
		now := int64(1000)
		for step := range 20_000 {
			// Homes crowd into slots 1, 3 and the last one, whose runs
			// wrap around to slot 0.
			key := rng.Uint64N(keySpace)<<40 | []uint64{1, 3, 1<<40 - 1}[rng.IntN(3)]
			switch op := rng.IntN(10); {
			case op < 6:
				tat := now + rng.Int64N(100)
				tab.put(key, tat)
				want[key] = tat
			case op < 8:
				tab.remove(key)
				delete(want, key)
			default:
				now += rng.Int64N(20)
				tab.sweep(now, rng.IntN(40))
				for k, tat := range want {
					if _, ok := tab.get(k); !ok && tat <= now {
						delete(want, k) // swept, as it may be
					}
				}
			}
			if tab.n != len(want) {
				t.Fatalf("key space %d, step %d: %d entries, want %d", keySpace, step, tab.n, len(want))
			}
			if len(tab.slots) > 0 && tab.n*4 > len(tab.slots)*3 {
				t.Fatalf("key space %d, step %d: %d entries in %d slots", keySpace, step, tab.n, len(tab.slots))
			}
			for k, tat := range want {
				if got, ok := tab.get(k); !ok || got != tat {
					t.Fatalf("key space %d, step %d: get(%#x) = %d, %t, want %d", keySpace, step, k, got, ok, tat)
				}
				if tat < tab.floor {
					t.Fatalf("key space %d, step %d: floor %d above the TAT %d of %#x", keySpace, step, tab.floor, tat, k)
				}
			}
		}
	}
}

// TestBucketTableSweepCoversAll checks that sweeping a table of expired
// entries empties it within two passes' worth of sweeps (removals use up
// sweep steps, and shrinking restarts the hand), and shrinks it.
func TestBucketTableSweepCoversAll(t *testing.T) {
	var tab bucketTable
	for i := range uint64(1000) {
		tab.put(i*0x9e3779b97f4a7c15|1, 10)
	}
	slots := len(tab.slots)
	for range 2 * slots / sweepSlots {
		tab.sweep(10, sweepSlots)
	}
	if tab.n != 0 {
		t.Fatalf("%d entries left after sweeping every slot twice", tab.n)
	}
	if len(tab.slots) >= slots {
		t.Fatalf("table kept %d slots after emptying, had %d", len(tab.slots), slots)
	}
}

func BenchmarkKey(b *testing.B) {
	s := New(Options{})
	h := store.Hit{
		Domain:  "test",
		Entries: []store.Entry{{Key: "api_key", Value: "user-12345"}, {Key: "endpoint", Value: "/search"}},
		Limit:   algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 10, Period: time.Second.Microseconds()},
	}
	var x uint64
	for b.Loop() {
		x += s.key(&h)
	}
	_ = x
}

// TestShardLayout checks that the fields a token-bucket Apply uses share
// one cache line and that a shard fills whole lines.
func TestShardLayout(t *testing.T) {
	var sh shard
	if size := unsafe.Sizeof(sh); size%cacheLine != 0 {
		t.Errorf("shard is %d bytes, want a multiple of %d", size, cacheLine)
	}
	if end := unsafe.Offsetof(sh.buckets) + unsafe.Offsetof(sh.buckets.floor) + unsafe.Sizeof(sh.buckets.floor); end > cacheLine {
		t.Errorf("token-bucket fields end at byte %d, want them in the first %d", end, cacheLine)
	}
	s := New(Options{Shards: 4})
	if addr := uintptr(unsafe.Pointer(&s.shards[0])); addr%cacheLine != 0 {
		t.Errorf("shards start at %#x, want a multiple of %d", addr, cacheLine)
	}
}
