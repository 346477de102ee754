package cached_test

import (
	"context"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/cached"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
)

// BenchmarkCachedLocal compares a hit decided from a lease (cached) with
// the same hit applied to the memory store (memory), the floor of a
// decision in this process. Run with -count 3 and compare the ratio of
// the two within each run.
func BenchmarkCachedLocal(b *testing.B) {
	l := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 1 << 40, Period: hour}
	h := []store.Hit{{Domain: "bench", Entries: []store.Entry{{Key: "user", Value: "alice"}}, Limit: l, Cost: 1, Cached: true}}
	for _, kind := range []algorithm.Kind{algorithm.FixedWindow, algorithm.TokenBucket} {
		h[0].Limit.Kind = kind
		m := memory.New(memory.Options{})
		c := cached.New(cached.Options{Inner: m, Leaser: m})
		for _, tc := range []struct {
			name string
			s    store.Store
		}{{"memory", m}, {"cached", c}} {
			b.Run(kind.String()+"/"+tc.name, func(b *testing.B) {
				ctx := context.Background()
				v := make([]algorithm.Verdict, 1)
				b.ReportAllocs()
				for b.Loop() {
					if err := tc.s.Apply(ctx, h, v); err != nil || !v[0].Allowed {
						b.Fatal(err, v[0])
					}
				}
			})
		}
		if err := c.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCachedStrict measures what the cached store adds to a strict
// hit, which it hands to the inner store: the app puts it in front of
// Redis whatever the rules' precision.
func BenchmarkCachedStrict(b *testing.B) {
	l := algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 1 << 40, Period: hour}
	h := []store.Hit{{Domain: "bench", Entries: []store.Entry{{Key: "user", Value: "alice"}}, Limit: l, Cost: 1}}
	m := memory.New(memory.Options{})
	c := cached.New(cached.Options{Inner: m, Leaser: m})
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	for _, tc := range []struct {
		name string
		s    store.Store
	}{{"memory", m}, {"through_cached", c}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			v := make([]algorithm.Verdict, 1)
			b.ReportAllocs()
			for b.Loop() {
				if err := tc.s.Apply(ctx, h, v); err != nil || !v[0].Allowed {
					b.Fatal(err, v[0])
				}
			}
		})
	}
}
