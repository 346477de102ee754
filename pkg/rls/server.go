// Package rls serves Envoy's rate-limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, over gRPC. It
// turns the protobuf request into a limiter.Request, asks the engine, and
// turns the limiter.Response back into a RateLimitResponse. On the serving
// side it is the only package that imports Envoy's protos: the engine and
// the HTTP API see plain Go values. (Packages rlsclient and loadgen import
// them too, to call a rate-limit service from the query and bench
// commands.) A gRPC server of the service encodes with Codec
// (grpc.ForceServerCodecV2), which writes an answer's dynamic metadata
// without the protobuf runtime's reflection.
//
// The engine checks requests, structure and bounds alike (see
// limiter.Options); this adapter checks only what the conversion needs, an
// override's unit. Either way a malformed request is answered with
// codes.InvalidArgument and a message naming the descriptor and entry by
// index, such as "invalid rate-limit request: descriptors[2].entries[0]:
// empty key". Keys and values are compared as bytes: invalid UTF-8 is
// accepted, since proto3 strings from Envoy are already validated by the
// protobuf decoder and the engine never interprets them.
//
// With Options.TracerProvider, each ShouldRateLimit call is a server span
// under the W3C trace context (traceparent) in the call's metadata, read
// with the propagation package rather than a global propagator; the
// engine's spans are its children. The JSON endpoint, not a gRPC call,
// gets the engine's spans alone.
package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
)

// ServiceName is the gRPC service name of Envoy's rate-limit service, under
// which the health service reports readiness.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// StoreServiceName is the gRPC health service that tells whether the
// counter store answers; see SetStoreHealthy.
const StoreServiceName = "tollgate.store"

// Checker decides rate-limit requests; *limiter.Limiter implements it.
type Checker interface {
	Check(ctx context.Context, req *limiter.Request) (*limiter.Response, error)
}

// intoChecker is implemented by checkers that can write into a pooled
// Response, as *limiter.Limiter does.
type intoChecker interface {
	CheckInto(ctx context.Context, req *limiter.Request, resp *limiter.Response) error
}

// Options configures a Server. Limiter is required.
type Options struct {
	// Limiter decides requests, and checks them: request bounds are
	// limiter.Options. A Checker that also has CheckInto, as
	// *limiter.Limiter does, answers into a pooled limiter.Response.
	Limiter Checker
	// Logger receives internal errors; nil discards.
	Logger *slog.Logger
	// TracerProvider traces every ShouldRateLimit call with a server span,
	// the child of the W3C trace context (traceparent) that came with the
	// call; nil means no spans at all, at no cost.
	TracerProvider trace.TracerProvider
	// ResponseDynamicMetadata adds to every answer's dynamic_metadata what
	// envoyproxy/ratelimit adds with RESPONSE_DYNAMIC_METADATA=true: the
	// domain, the descriptors, hitsAddend and the merged metadata of the
	// rules that passed (see metadata.go).
	ResponseDynamicMetadata bool
	// OmitDecisionMetadata leaves out of dynamic_metadata tollgate's own
	// key, DecisionKey, which says per descriptor which rule decided it,
	// its code and what remains.
	OmitDecisionMetadata bool
	// UntrustedGRPC and UntrustedJSON mark the calls of the gRPC service
	// and of POST /json as from sources that may not charge always or
	// refund (limiter.Request.Untrusted).
	UntrustedGRPC, UntrustedJSON bool
	// TrustCaller, if not nil, reports whether the caller of an untrusted
	// call that carries a charge marker or a refund is trusted after all,
	// such as by its client certificate. It is asked of no other call.
	TrustCaller func(context.Context) bool
}

// Server implements rlsv3.RateLimitServiceServer.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer

	limiter Checker
	into    intoChecker // limiter, when it can write into a Response
	log     *slog.Logger
	tracer  trace.Tracer // nil: no spans
	health  *health.Server
	pool    sync.Pool // *scratch

	ratelimitMetadata bool // Options.ResponseDynamicMetadata
	omitDecisions     bool // Options.OmitDecisionMetadata
	untrustedGRPC     bool // Options.UntrustedGRPC
	untrustedJSON     bool // Options.UntrustedJSON
	trustCaller       func(context.Context) bool
}

var _ rlsv3.RateLimitServiceServer = (*Server)(nil)

// New returns a Server whose health service reports SERVING. A Server
// without a Limiter answers every call with codes.Unavailable.
func New(opts Options) *Server {
	s := &Server{
		limiter: opts.Limiter,
		log:     opts.Logger,
		health:  health.NewServer(),

		ratelimitMetadata: opts.ResponseDynamicMetadata,
		omitDecisions:     opts.OmitDecisionMetadata,
		untrustedGRPC:     opts.UntrustedGRPC,
		untrustedJSON:     opts.UntrustedJSON,
		trustCaller:       opts.TrustCaller,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "rls")
	s.into, _ = opts.Limiter.(intoChecker)
	if opts.TracerProvider != nil {
		s.tracer = opts.TracerProvider.Tracer(tracerName)
	}
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(StoreServiceName, healthpb.HealthCheckResponse_SERVING)
	s.pool.New = func() any { return new(scratch) }
	return s
}

// Register registers the rate-limit service and the grpc.health.v1 service
// on g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
}

// Health returns the health service Register registers, for callers that
// manage statuses themselves or call its Shutdown when draining.
func (s *Server) Health() *health.Server { return s.health }

// SetServing sets the health of the overall server ("") and of ServiceName
// to SERVING or NOT_SERVING.
func (s *Server) SetServing(serving bool) {
	s.health.SetServingStatus("", servingStatus(serving))
	s.health.SetServingStatus(ServiceName, servingStatus(serving))
}

// SetStoreHealthy sets the health of StoreServiceName: SERVING while the
// store answers, NOT_SERVING while decisions are made by failure modes.
func (s *Server) SetStoreHealthy(healthy bool) {
	s.health.SetServingStatus(StoreServiceName, servingStatus(healthy))
}

// servingStatus returns SERVING or NOT_SERVING.
func servingStatus(serving bool) healthpb.HealthCheckResponse_ServingStatus {
	if serving {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

// ShouldRateLimit answers one rate-limit request. It never answers with
// codes.Unknown: a malformed request gets codes.InvalidArgument, an ended
// context its own code, an unavailable engine codes.Unavailable and any
// other failure codes.Internal.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if s.tracer == nil {
		return s.shouldRateLimit(ctx, req, s.untrustedGRPC)
	}
	ctx, span := s.startRPC(ctx, req)
	resp, err := s.shouldRateLimit(ctx, req, s.untrustedGRPC)
	endRPC(span, resp, err)
	return resp, err
}

// shouldRateLimit is ShouldRateLimit without the server span, which the
// JSON handler, not being a gRPC call, goes without; untrusted says
// whether the caller's source is trusted.
func (s *Server) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest, untrusted bool) (resp *rlsv3.RateLimitResponse, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.ErrorContext(ctx, "panic answering ShouldRateLimit",
				slog.Any("panic", p), slog.String("domain", req.GetDomain()), slog.String("stack", string(debug.Stack())))
			resp, err = nil, status.Error(codes.Internal, "internal error")
		}
	}()
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	if s.limiter == nil {
		return nil, status.Error(codes.Unavailable, "rate limiter not configured")
	}
	sc := s.pool.Get().(*scratch)
	defer func() {
		if sc.reset() {
			s.pool.Put(sc)
		}
	}()
	lreq, err := convert(req, sc)
	if err != nil {
		return nil, s.grpcError(ctx, err)
	}
	lreq.Untrusted = untrusted && !s.trustedCaller(ctx, lreq)
	lresp := &sc.resp
	if s.into != nil {
		err = s.into.CheckInto(ctx, lreq, lresp)
	} else {
		lresp, err = s.limiter.Check(ctx, lreq)
	}
	if err != nil {
		return nil, s.grpcError(ctx, err)
	}
	resp = toProto(lresp)
	resp.DynamicMetadata = s.dynamicMetadata(req, lresp)
	return resp, nil
}

// grpcError maps an engine error to a gRPC status.
func (s *Server) grpcError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, limiter.ErrInvalidRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	case errors.Is(err, limiter.ErrUnavailable), errors.Is(err, limiter.ErrNoRules):
		return status.Error(codes.Unavailable, err.Error())
	}
	s.log.ErrorContext(ctx, "rate-limit check failed", slog.Any("error", err))
	return status.Error(codes.Internal, "rate-limit check failed")
}

// scratch holds the pooled storage of one converted request and its
// answer. toProto copies everything out of the answer, so it can be reused.
type scratch struct {
	resp      limiter.Response
	req       limiter.Request
	descs     []limiter.Descriptor
	entries   []descriptor.Entry
	overrides []limiter.Override
}

// maxPooledEntries bounds the storage of a pooled scratch, in entries and
// in descriptors. The engine, not this adapter, bounds requests, so a
// request larger than any the engine admits still gets converted; its
// storage goes to the garbage collector instead of staying in the pool.
const maxPooledEntries = 4096

// reset drops references to request strings before the scratch is pooled,
// and reports whether it is small enough to pool. Only entries and req hold
// any: descs point into the scratch's own arrays, and convert overwrites
// them.
func (sc *scratch) reset() bool {
	clear(sc.entries)
	sc.req = limiter.Request{}
	sc.descs = sc.descs[:0]
	sc.entries = sc.entries[:0]
	sc.overrides = sc.overrides[:0]
	return cap(sc.entries) <= maxPooledEntries && cap(sc.descs) <= maxPooledEntries
}

// convert converts req into sc.req. It checks only an override's unit,
// which it must convert; the engine checks the rest.
func convert(req *rlsv3.RateLimitRequest, sc *scratch) (*limiter.Request, error) {
	total, overrides := 0, 0
	for _, d := range req.GetDescriptors() {
		total += len(d.GetEntries())
		if d.GetLimit() != nil {
			overrides++
		}
	}
	sc.descs = grow(sc.descs, len(req.GetDescriptors()))
	sc.entries = grow(sc.entries, total)
	sc.overrides = grow(sc.overrides, overrides)
	total, overrides = 0, 0
	for i, d := range req.GetDescriptors() {
		ld := &sc.descs[i]
		*ld = limiter.Descriptor{}
		n := len(d.GetEntries())
		es := sc.entries[total : total+n : total+n]
		total += n
		for j, e := range d.GetEntries() {
			es[j] = descriptor.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		ld.Entries = es
		if h := d.GetHitsAddend(); h != nil {
			ld.Hits, ld.HasHits = h.GetValue(), true
		}
		ld.Refund = d.GetIsNegativeHits()
		if o := d.GetLimit(); o != nil {
			u, ok := unitOf(o.GetUnit())
			if !ok {
				return nil, fmt.Errorf("%w: descriptors[%d].limit: unit %v not supported", limiter.ErrInvalidRequest, i, o.GetUnit())
			}
			lo := &sc.overrides[overrides]
			overrides++
			*lo = limiter.Override{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: u}
			if m := o.GetUnitMultiplier(); m != nil {
				lo.UnitMultiplier = m.GetValue()
			}
			ld.Override = lo
		}
	}
	sc.req = limiter.Request{Domain: req.GetDomain(), Descriptors: sc.descs, Hits: req.GetHitsAddend()}
	return &sc.req, nil
}

// trustedCaller reports whether Options.TrustCaller trusts the caller of
// req, asking only when req charges always or refunds.
func (s *Server) trustedCaller(ctx context.Context, req *limiter.Request) bool {
	return s.trustCaller != nil && privileged(req) && s.trustCaller(ctx)
}

// privileged reports whether req charges always or refunds, which only a
// trusted caller may.
func privileged(req *limiter.Request) bool {
	for _, d := range req.Descriptors {
		if d.Refund || slices.ContainsFunc(d.Entries, func(e descriptor.Entry) bool { return e.Key == limiter.ChargeKey }) {
			return true
		}
	}
	return false
}

// unitOf converts an override unit; its values equal descriptor.Unit's.
func unitOf(u typev3.RateLimitUnit) (descriptor.Unit, bool) {
	switch u {
	case typev3.RateLimitUnit_SECOND, typev3.RateLimitUnit_MINUTE, typev3.RateLimitUnit_HOUR,
		typev3.RateLimitUnit_DAY, typev3.RateLimitUnit_MONTH, typev3.RateLimitUnit_YEAR:
		return descriptor.Unit(u), true
	}
	return 0, false
}

// oneStatus is a response with room for one status, allocated at once, so
// that the common answer costs a single allocation. A unit multiplier and
// more statuses are allocated apart.
type oneStatus struct {
	resp   rlsv3.RateLimitResponse
	ptr    [1]*rlsv3.RateLimitResponse_DescriptorStatus
	status [1]rlsv3.RateLimitResponse_DescriptorStatus
	limit  [1]rlsv3.RateLimitResponse_RateLimit
	dur    [1]durationpb.Duration
}

// oneStatus3 and oneStatus5 add room for the headers of an OK answer (three
// in the X-RateLimit and draft-03 styles, two in the IETF one) and of an
// X-RateLimit 429 (five). A header takes 104 bytes, so sizing the block to
// the answer saves a third of the bytes of an OK answer.
type (
	oneStatus3 struct {
		oneStatus
		hdrPtrs [3]*corev3.HeaderValue
		hdrs    [3]corev3.HeaderValue
	}
	oneStatus5 struct {
		oneStatus
		hdrPtrs [5]*corev3.HeaderValue
		hdrs    [5]corev3.HeaderValue
	}
)

// toProto converts an engine answer.
func toProto(r *limiter.Response) *rlsv3.RateLimitResponse {
	n := len(r.Statuses)
	h := len(r.Headers)
	var (
		b     *oneStatus
		hptrs []*corev3.HeaderValue
		hdrs  []corev3.HeaderValue
	)
	switch {
	case h == 0:
		b = new(oneStatus)
	case h <= 3:
		b3 := new(oneStatus3)
		b, hptrs, hdrs = &b3.oneStatus, b3.hdrPtrs[:h], b3.hdrs[:h]
	case h <= 5:
		b5 := new(oneStatus5)
		b, hptrs, hdrs = &b5.oneStatus, b5.hdrPtrs[:h], b5.hdrs[:h]
	default:
		b = new(oneStatus)
		hptrs, hdrs = make([]*corev3.HeaderValue, h), make([]corev3.HeaderValue, h)
	}
	resp := &b.resp
	resp.OverallCode = rlsv3.RateLimitResponse_Code(r.Code)

	var (
		ptrs     []*rlsv3.RateLimitResponse_DescriptorStatus
		statuses []rlsv3.RateLimitResponse_DescriptorStatus
		limits   []rlsv3.RateLimitResponse_RateLimit
		durs     []durationpb.Duration
		mults    []wrapperspb.UInt32Value
	)
	withLimit, withMult := 0, 0
	for i := range r.Statuses {
		if l := r.Statuses[i].Limit; l != nil {
			withLimit++
			if l.UnitMultiplier > 1 {
				withMult++
			}
		}
	}
	if n <= 1 {
		ptrs, statuses, limits, durs = b.ptr[:n], b.status[:n], b.limit[:withLimit], b.dur[:withLimit]
	} else {
		ptrs = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
		statuses = make([]rlsv3.RateLimitResponse_DescriptorStatus, n)
		limits = make([]rlsv3.RateLimitResponse_RateLimit, withLimit)
		durs = make([]durationpb.Duration, withLimit)
	}
	if withMult > 0 {
		mults = make([]wrapperspb.UInt32Value, withMult)
	}
	nl, nm := 0, 0
	for i := range r.Statuses {
		st := &r.Statuses[i]
		ps := &statuses[i]
		ps.Code = rlsv3.RateLimitResponse_Code(st.Code)
		ps.LimitRemaining = st.Remaining
		if l := st.Limit; l != nil {
			pl := &limits[nl]
			pd := &durs[nl]
			nl++
			pl.Name = l.Name
			pl.RequestsPerUnit = l.RequestsPerUnit
			pl.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(l.Unit)
			if l.UnitMultiplier > 1 {
				pm := &mults[nm]
				nm++
				pm.Value = l.UnitMultiplier
				pl.UnitMultiplier = pm
			}
			ps.CurrentLimit = pl
			pd.Seconds = int64(st.ResetAfter / time.Second)
			pd.Nanos = int32(st.ResetAfter % time.Second)
			ps.DurationUntilReset = pd
		}
		ptrs[i] = ps
	}
	resp.Statuses = ptrs

	if h > 0 {
		for i, hd := range r.Headers {
			hdrs[i].Key, hdrs[i].Value = hd.Key, hd.Value
			hptrs[i] = &hdrs[i]
		}
		resp.ResponseHeadersToAdd = hptrs
	}
	resp.RawBody = r.Body
	return resp
}

// grow returns s resized to n, reusing its array when large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
