package rls

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// tracerName is the instrumentation scope of the adapter's spans.
const tracerName = "github.com/tollgatehq/tollgate/pkg/rls"

// rpcName is the full name of the traced method, the server span's name.
const rpcName = ServiceName + "/ShouldRateLimit"

// startRPC starts the server span of a ShouldRateLimit call, as a child of
// the W3C trace context (traceparent, tracestate) in the call's incoming
// metadata, when it has one.
func (s *Server) startRPC(ctx context.Context, req *rlsv3.RateLimitRequest) (context.Context, trace.Span) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = propagation.TraceContext{}.Extract(ctx, metadataCarrier(md))
	}
	return s.tracer.Start(ctx, rpcName,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			semconv.RPCSystemNameGRPC,
			semconv.RPCMethod(rpcName),
			attrDomain.String(req.GetDomain()),
			attrDescriptors.Int(len(req.GetDescriptors())),
		))
}

// The adapter's own span attributes; the engine's spans use the same names.
const (
	attrDomain      attribute.Key = "tollgate.domain"
	attrDescriptors attribute.Key = "tollgate.descriptors"
	attrCode        attribute.Key = "tollgate.code"
)

// endRPC ends the server span with the call's gRPC status and answer. As
// the semantic conventions ask of a server, only codes that say the
// server failed mark the span failed; a malformed request does not.
func endRPC(span trace.Span, resp *rlsv3.RateLimitResponse, err error) {
	code := status.Code(err)
	span.SetAttributes(semconv.RPCResponseStatusCode(grpcCodeName(code)))
	if err == nil {
		span.SetAttributes(attrCode.String(resp.GetOverallCode().String()))
	}
	switch code {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		span.SetStatus(otelcodes.Error, grpcCodeName(code))
	}
	span.End()
}

// grpcCodeNames are the gRPC status codes as the protocol spells them.
var grpcCodeNames = [...]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
	codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
	codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
	codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
	codes.Unauthenticated: "UNAUTHENTICATED",
}

// grpcCodeName returns c as the protocol spells it, such as
// "INVALID_ARGUMENT".
func grpcCodeName(c codes.Code) string {
	if int(c) < len(grpcCodeNames) {
		return grpcCodeNames[c]
	}
	return c.String()
}

// metadataCarrier lets a propagator read gRPC metadata, whose keys are
// lower case.
type metadataCarrier metadata.MD

var _ propagation.TextMapCarrier = metadataCarrier(nil)

// Get returns the first value of key.
func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key.
func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

// Keys returns the keys present.
func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
