package shadow_test

import (
	"context"
	"testing"
	"testing/fstest"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/shadow"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
)

// BenchmarkCheck is the engine's check of one descriptor without a
// shadow rule set (none), with one whose worker is blocked so that every
// call is copied and dropped (blocked: the request path's own cost,
// without the worker's decisions competing for the same cores), and with
// one deciding every call it can (on: the wall time per decision with
// the worker sharing the cores). Run it several times with -count 1 to
// interleave the variants. dropped/op is the share of calls the queue had
// no room for, decided/op the share the shadow rules decided.
func BenchmarkCheck(b *testing.B) {
	rules := func(limit string) *descriptor.Tree {
		tree, err := descriptor.LoadFS(fstest.MapFS{"api.yaml": {Data: []byte(`
domain: api
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: ` + limit + `, algorithm: token_bucket, name: per_client}
`)}}, descriptor.Options{})
		if err != nil {
			b.Fatal(err)
		}
		return tree
	}
	live, lower := rules("4000000000"), rules("2000000000")
	for _, mode := range []string{"none", "blocked", "on"} {
		b.Run("shadow="+mode, func(b *testing.B) {
			opts := limiter.Options{Store: memory.New(memory.Options{}), Tree: func() *descriptor.Tree { return live }}
			var set *shadow.Set
			if mode != "none" {
				so := shadow.Options{Tree: func() *descriptor.Tree { return lower }}
				release := make(chan struct{})
				if mode == "blocked" {
					so.Queue = 1
					so.Tree = func() *descriptor.Tree { <-release; return lower }
				}
				var err error
				if set, err = shadow.New(so); err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { _ = set.Run(ctx); close(done) }()
				defer func() { <-done }()
				defer cancel()
				defer close(release)
				opts.Recorder = set
			}
			lim, err := limiter.New(opts)
			if err != nil {
				b.Fatal(err)
			}
			req := &limiter.Request{Domain: "api", Descriptors: []limiter.Descriptor{
				{Entries: []descriptor.Entry{{Key: "client", Value: "c1"}}},
			}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := lim.Check(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			if set != nil {
				st := set.Status()
				b.ReportMetric(float64(st.Dropped)/float64(b.N), "dropped/op")
				b.ReportMetric(float64(st.Decided)/float64(b.N), "decided/op")
				if mode == "blocked" && st.Dropped < int64(b.N)*99/100 {
					b.Errorf("%d of %d calls dropped with the worker blocked", st.Dropped, b.N)
				}
			}
		})
	}
}
