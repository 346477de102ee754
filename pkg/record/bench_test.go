package record_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

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

// BenchmarkReplay replays a recording of 100 000 calls of 10 000 clients
// through one rule set (against the recorded answers) and through two
// (beside a baseline). decisions/s is the figure the README quotes; run
// it with -cpu 1 for one core's.
func BenchmarkReplay(b *testing.B) {
	tree, err := descriptor.LoadFS(fstest.MapFS{"api.yaml": {Data: []byte(`
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 20, algorithm: fixed_window, name: per_minute}
    descriptors:
      - key: endpoint
        rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 5, name: per_endpoint}
`)}}, descriptor.Options{})
	if err != nil {
		b.Fatal(err)
	}
	const calls = 100_000
	var file bytes.Buffer
	now := time.Date(2026, 11, 28, 17, 0, 0, 0, time.UTC)
	rec, err := record.New(record.Options{Output: &file, Queue: calls, Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	lim, err := limiter.New(limiter.Options{Store: memory.New(memory.Options{Now: func() time.Time { return now }}),
		Tree: func() *descriptor.Tree { return tree }, Now: func() time.Time { return now }, Recorder: rec})
	if err != nil {
		b.Fatal(err)
	}
	if err := rec.Start(record.Span{}); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range calls {
		now = now.Add(time.Duration(rng.IntN(2000)) * time.Microsecond)
		key := descriptor.Entry{Key: "api_key", Value: fmt.Sprintf("key-%d", rng.IntN(10_000))}
		req := &limiter.Request{Domain: "api", Descriptors: []limiter.Descriptor{
			{Entries: []descriptor.Entry{key}},
			{Entries: []descriptor.Entry{key, {Key: "endpoint", Value: "/search"}}},
		}}
		if _, err := lim.Check(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := rec.Stop(); err != nil {
		b.Fatal(err)
	}
	for _, set := range []string{"recorded", "baseline"} {
		b.Run("before="+set, func(b *testing.B) {
			opts := record.ReplayOptions{Rules: tree}
			if set == "baseline" {
				opts.Baseline = tree
			}
			var decisions int64
			b.ReportAllocs()
			for b.Loop() {
				rep, err := record.Replay(context.Background(), []record.Input{{Name: "bench", R: bytes.NewReader(file.Bytes())}}, opts)
				if err != nil {
					b.Fatal(err)
				}
				if rep.Calls != calls {
					b.Fatalf("replayed %d calls", rep.Calls)
				}
				decisions += rep.Decisions
			}
			b.ReportMetric(float64(decisions)/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
