package limiter

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/top"
)

const benchYAML = `
domain: api
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: 4000000000, algorithm: token_bucket, name: per_client}
  - key: tenant
    descriptors:
      - key: path
        rate_limits:
          - {unit: day, requests_per_unit: 4000000000, algorithm: token_bucket}
          - {unit: hour, requests_per_unit: 4000000000, algorithm: fixed_window}
`

// benchPenaltyYAML is benchYAML's client rule under a penalty.
const benchPenaltyYAML = `
domain: api
descriptors:
  - key: client
    rate_limit:
      unit: day
      requests_per_unit: 4000000000
      algorithm: token_bucket
      name: per_client
      penalty: {tolerance: 3, cooldown: 10s, factor: 2, max: 15m, forgive_after: 1h}
`

// BenchmarkCheck decides requests against the memory store, each case
// with the heavy-hitter summaries of package top observing and without,
// one after the other, so that their ratio is measured under the same
// conditions.
func BenchmarkCheck(b *testing.B) {
	cases := []struct {
		name string
		req  *Request
		yaml string // benchYAML when empty
	}{
		{"one descriptor", req("api", d("client=c1")), ""},
		{"three descriptors", req("api", d("client=c1"), d("tenant=t1", "path=/x"), d("other=o")), ""},
		{"one descriptor with a penalty", req("api", d("client=c1")), benchPenaltyYAML},
	}
	for _, bc := range cases {
		for _, observe := range []bool{false, true} {
			name := bc.name + "/observer=off"
			if observe {
				name = bc.name + "/observer=on"
			}
			b.Run(name, func(b *testing.B) {
				// As the app runs it: an override registry, here holding none.
				ovs := &overrides{}
				yaml := benchYAML
				if bc.yaml != "" {
					yaml = bc.yaml
				}
				f := newFixture(b, yaml, func(o *Options) {
					o.Overrides = ovs.current
					if observe {
						o.Observer = newTopObserver(b)
					}
				})
				f.store.inner, f.lim.store = nil, f.store.inner // count without recording
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					resp, err := f.lim.Check(ctx, bc.req)
					if err != nil || resp.Code != OK {
						b.Fatalf("Check = %+v, %v", resp, err)
					}
				}
			})
		}
	}
}

// topObserver observes with package top's recorder, as the app does.
type topObserver struct{ rec *top.Recorder }

func newTopObserver(tb testing.TB) topObserver {
	rec, err := top.New(top.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return topObserver{rec: rec}
}

func (o topObserver) Rule(domain, rule, limit string, lim *descriptor.Limit) RuleObserver {
	return o.rec.Rule(domain, rule, limit, lim)
}

// BenchmarkCheckTraced is BenchmarkCheck's first case with every decision
// traced by the SDK, its spans dropped instead of exported.
func BenchmarkCheckTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(dropSpans{}))
	f := newFixture(b, benchYAML, func(o *Options) { o.TracerProvider = tp })
	f.store.inner, f.lim.store = nil, f.store.inner
	r := req("api", d("client=c1"))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.lim.Check(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

// dropSpans is a span processor that keeps nothing.
type dropSpans struct{}

func (dropSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropSpans) Shutdown(context.Context) error                  { return nil }
func (dropSpans) ForceFlush(context.Context) error                { return nil }
