package limiter

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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
		b.Run(bc.name, func(b *testing.B) {
			// As the app runs it: an override registry, here holding none.
			ovs := &overrides{}
			yaml := benchYAML
			if bc.yaml != "" {
				yaml = bc.yaml
			}
			f := newFixture(b, yaml, func(o *Options) { o.Overrides = ovs.current })
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
