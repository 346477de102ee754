package record_test

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/record"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
)

// BenchmarkCheck is the engine's check of one descriptor without a
// recorder (none), with one but no recording on (idle), recording every
// call to io.Discard (discard) or a file (file), and with the writer
// blocked so that every line is built and dropped (full: the request
// path's own cost, without the writer goroutine's work competing for the
// same cores). Run it several times with -count 1 to interleave the
// variants. dropped/op is the share of lines the queue had no room for.
func BenchmarkCheck(b *testing.B) {
	tree, err := descriptor.LoadFS(fstest.MapFS{"api.yaml": {Data: []byte(`
domain: api
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: 4000000000, algorithm: token_bucket, name: per_client}
`)}}, descriptor.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"none", "idle", "discard", "file", "full"} {
		b.Run("recorder="+mode, func(b *testing.B) {
			opts := limiter.Options{Store: memory.New(memory.Options{}), Tree: func() *descriptor.Tree { return tree }}
			var rec *record.Recorder
			if mode != "none" {
				ro := record.Options{Output: io.Discard}
				switch mode {
				case "file":
					ro = record.Options{Path: filepath.Join(b.TempDir(), "calls.jsonl")}
				case "full":
					ro = record.Options{Output: &blockedWriter{release: make(chan struct{})}, Queue: 1}
				}
				if rec, err = record.New(ro); err != nil {
					b.Fatal(err)
				}
				defer rec.Close()
				if w, ok := ro.Output.(*blockedWriter); ok {
					defer close(w.release) // before Close, which waits for the writer
					defer func() {
						if st := rec.Status(); st.Dropped < int64(b.N)*99/100 {
							b.Errorf("%d of %d lines dropped with the writer blocked", st.Dropped, b.N)
						}
					}()
				}
				opts.Recorder = rec
				if mode != "idle" {
					if err := rec.Start(record.Span{}); err != nil {
						b.Fatal(err)
					}
				}
				if w, ok := ro.Output.(*blockedWriter); ok {
					w.hold()
				}
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
			if rec != nil {
				b.ReportMetric(float64(rec.Status().Dropped)/float64(b.N), "dropped/op")
			}
		})
	}
}
