package limiter

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
)

// secretValue is a descriptor value no span may carry.
const secretValue = "sk_live_do_not_trace"

// wantSpan is a finished span as the test expects it: its attributes
// (only those named), status and parent, by index into the spans.
type wantSpan struct {
	name   string
	parent int // index of the parent span; -1: the test's root span
	attrs  map[string]string
	status codes.Code
	desc   string
}

func TestSpans(t *testing.T) {
	unavailable := fmt.Errorf("redis: %w", store.ErrUnavailable)
	tests := []struct {
		name     string
		storeErr error
		req      *Request
		wantErr  bool
		spans    []wantSpan
	}{
		{
			name: "counted",
			req:  req("api", d("open="+secretValue), d("other="+secretValue)),
			spans: []wantSpan{
				{name: "store.Apply", parent: 1, attrs: map[string]string{"tollgate.store": "primary", "tollgate.hits": "1"}},
				{name: "limiter.Check", parent: -1, attrs: map[string]string{
					"tollgate.domain": "api", "tollgate.descriptors": "2", "tollgate.code": "OK",
					"tollgate.rules": "[open ]", "tollgate.limits": "[ ]", "tollgate.results": "[ok unmatched]",
					"tollgate.degraded": "false", "tollgate.failure_modes": "",
				}},
			},
		},
		{
			name:     "store fails",
			storeErr: unavailable,
			req:      req("api", d("local="+secretValue), d("closed="+secretValue)),
			spans: []wantSpan{
				{name: "store.Apply", parent: 2, attrs: map[string]string{"tollgate.store": "primary", "tollgate.hits": "2", "error.type": "store_unavailable"},
					status: codes.Error, desc: "store_unavailable"},
				{name: "store.Apply", parent: 2, attrs: map[string]string{"tollgate.store": "fallback", "tollgate.hits": "1"}},
				{name: "limiter.Check", parent: -1, attrs: map[string]string{
					"tollgate.code": "OVER_LIMIT", "tollgate.rules": "[local closed]", "tollgate.results": "[ok degraded]",
					"tollgate.degraded": "true", "tollgate.failure_modes": "[local closed]",
				}},
			},
		},
		{
			name:    "invalid request",
			req:     req("api", d()),
			wantErr: true,
			spans: []wantSpan{
				{name: "limiter.Check", parent: -1, attrs: map[string]string{"error.type": "invalid_request", "tollgate.code": ""},
					status: codes.Error, desc: "invalid_request"},
			},
		},
		{
			name: "unknown domain",
			req:  req("nowhere", d("k="+secretValue)),
			spans: []wantSpan{
				{name: "limiter.Check", parent: -1, attrs: map[string]string{"tollgate.domain": "nowhere", "tollgate.code": "OK", "tollgate.rules": ""}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			f := newFixture(t, failureYAML, func(o *Options) {
				o.TracerProvider = tp
				o.Fallback = memory.New(memory.Options{})
			})
			f.store.err = tc.storeErr
			ctx, root := tp.Tracer("test").Start(context.Background(), "root")
			_, err := f.lim.Check(ctx, tc.req)
			root.End()
			if (err != nil) != tc.wantErr {
				t.Fatalf("Check error = %v, want error %v", err, tc.wantErr)
			}
			spans := rec.Ended()
			spans = spans[:len(spans)-1] // the root
			if len(spans) != len(tc.spans) {
				t.Fatalf("got %d spans %v, want %d", len(spans), names(spans), len(tc.spans))
			}
			for i, want := range tc.spans {
				got := spans[i]
				if got.Name() != want.name {
					t.Errorf("span %d: name %q, want %q", i, got.Name(), want.name)
				}
				wantParent := root.SpanContext().SpanID()
				if want.parent >= 0 {
					wantParent = spans[want.parent].SpanContext().SpanID()
				}
				if got.Parent().SpanID() != wantParent {
					t.Errorf("span %d (%s): parent %v, want %v", i, got.Name(), got.Parent().SpanID(), wantParent)
				}
				attrs := attrMap(got.Attributes())
				for k, v := range want.attrs {
					if attrs[k] != v {
						t.Errorf("span %d (%s): %s = %q, want %q", i, got.Name(), k, attrs[k], v)
					}
				}
				if got.Status().Code != want.status || got.Status().Description != want.desc {
					t.Errorf("span %d (%s): status %v %q, want %v %q", i, got.Name(), got.Status().Code, got.Status().Description, want.status, want.desc)
				}
				for k, v := range attrs {
					if strings.Contains(v, secretValue) {
						t.Errorf("span %d (%s): attribute %s carries a descriptor value: %q", i, got.Name(), k, v)
					}
				}
			}
		})
	}
}

func TestNoSpansWhenParentNotSampled(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	f := newFixture(t, failureYAML, func(o *Options) { o.TracerProvider = tp })
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
	if _, err := f.lim.Check(ctx, req("api", d("open=v"))); err != nil {
		t.Fatal(err)
	}
	if got := rec.Ended(); len(got) != 0 {
		t.Errorf("recorded %v under an unsampled parent", names(got))
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// attrMap formats attributes by key; a list is formatted as with %v.
func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		if kv.Value.Type() == attribute.STRINGSLICE {
			m[string(kv.Key)] = fmt.Sprint(kv.Value.AsStringSlice())
			continue
		}
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}
