package rls

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/tollgatehq/tollgate/pkg/limiter"
)

// The incoming trace context of the traced calls.
const (
	incomingTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	incomingSpan  = "00f067aa0ba902b7"
)

// TestServerSpan shows that a call carrying a traceparent gets a server
// span under it, with the engine's spans beneath, and that only a server
// failure marks the span failed.
func TestServerSpan(t *testing.T) {
	tests := []struct {
		name      string
		req       *rlsv3.RateLimitRequest
		checker   Checker // nil: the engine, traced
		wantAttrs map[string]string
		wantErr   bool // the span's status is Error
		wantSpans []string
	}{
		{
			name: "over the limit",
			req:  &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api_key=revoked_secret")}},
			wantAttrs: map[string]string{
				"rpc.system.name": "grpc", "rpc.method": "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
				"rpc.response.status_code": "OK", "tollgate.domain": "api", "tollgate.descriptors": "1", "tollgate.code": "OVER_LIMIT",
			},
			wantSpans: []string{"limiter.Check"},
		},
		{
			name: "counted",
			req:  &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api_key=k_secret"), desc("tier=gold")}},
			wantAttrs: map[string]string{
				"rpc.response.status_code": "OK", "tollgate.descriptors": "2", "tollgate.code": "OK",
			},
			wantSpans: []string{"store.Apply", "limiter.Check"},
		},
		{
			name:      "malformed request",
			req:       &rlsv3.RateLimitRequest{Domain: "api"},
			wantAttrs: map[string]string{"rpc.response.status_code": "INVALID_ARGUMENT", "tollgate.code": ""},
			wantSpans: []string{"limiter.Check"},
		},
		{
			name: "engine failure",
			req:  &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api_key=k_secret")}},
			checker: checkerFunc(func(context.Context, *limiter.Request) (*limiter.Response, error) {
				return nil, fmt.Errorf("engine broke on k_secret")
			}),
			wantAttrs: map[string]string{"rpc.response.status_code": "INTERNAL"},
			wantErr:   true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			checker := tc.checker
			if checker == nil {
				checker = newLimiter(t, func(o *limiter.Options) { o.TracerProvider = tp })
			}
			conn := serve(t, New(Options{Limiter: checker, TracerProvider: tp}))
			ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-"+incomingTrace+"-"+incomingSpan+"-01")
			_, _ = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, tc.req)

			spans := rec.Ended()
			if len(spans) != len(tc.wantSpans)+1 {
				t.Fatalf("got %d spans, want %v and the server span", len(spans), tc.wantSpans)
			}
			server := spans[len(spans)-1]
			if server.Name() != "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" || server.SpanKind() != trace.SpanKindServer {
				t.Errorf("server span: %q of kind %v", server.Name(), server.SpanKind())
			}
			if got := server.SpanContext().TraceID().String(); got != incomingTrace {
				t.Errorf("server span trace %s, want the incoming %s", got, incomingTrace)
			}
			if got := server.Parent(); got.SpanID().String() != incomingSpan || !got.IsRemote() {
				t.Errorf("server span parent %s (remote %v), want the incoming %s", got.SpanID(), got.IsRemote(), incomingSpan)
			}
			attrs := map[string]string{}
			for _, kv := range server.Attributes() {
				attrs[string(kv.Key)] = kv.Value.String()
			}
			for k, v := range tc.wantAttrs {
				if attrs[k] != v {
					t.Errorf("server span %s = %q, want %q", k, attrs[k], v)
				}
			}
			if got := server.Status().Code == otelcodes.Error; got != tc.wantErr {
				t.Errorf("server span status %v, want error %v", server.Status(), tc.wantErr)
			}
			// Each engine span is the child of the one after it; the last of
			// them, the decision, is the server span's.
			for i, name := range tc.wantSpans {
				if spans[i].Name() != name {
					t.Errorf("span %d: %q, want %q", i, spans[i].Name(), name)
				}
				if got, want := spans[i].Parent().SpanID(), spans[i+1].SpanContext().SpanID(); got != want {
					t.Errorf("span %d (%s): parent %s, want %s (%s)", i, name, got, want, spans[i+1].Name())
				}
			}
			for _, s := range spans {
				for _, kv := range s.Attributes() {
					if v := kv.Value.String(); strings.Contains(v, "secret") {
						t.Errorf("span %s: %s carries a descriptor value: %q", s.Name(), kv.Key, v)
					}
				}
				if strings.Contains(s.Status().Description, "secret") {
					t.Errorf("span %s: status carries a descriptor value: %q", s.Name(), s.Status().Description)
				}
			}
		})
	}
}

// TestJSONHasNoServerSpan shows that the JSON endpoint, not being a gRPC
// call, gets the engine's spans but no gRPC server span.
func TestJSONHasNoServerSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := New(Options{Limiter: newLimiter(t, func(o *limiter.Options) { o.TracerProvider = tp }), TracerProvider: tp})
	w := httptest.NewRecorder()
	body := `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k"}]}]}`
	s.JSONHandler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body)))
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	var got []string
	for _, s := range rec.Ended() {
		got = append(got, s.Name())
	}
	if want := []string{"store.Apply", "limiter.Check"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("spans %v, want %v", got, want)
	}
}
