package rls

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
)

// t0 is ten seconds into a minute: a fixed one-minute window resets 50
// seconds later, at 2026-01-01T00:01:00Z.
var t0 = time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)

const testYAML = `
domain: api
descriptors:
  - key: api_key
    value: "revoked_*"
    action: deny
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window, name: per_key}
  - key: tier
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 10, algorithm: fixed_window}
  - key: free
    rate_limit: {unlimited: true}
  - key: bench
    rate_limit: {unit: day, requests_per_unit: 4000000000, algorithm: token_bucket}
`

// newLimiter returns an engine over testYAML with a memory store and a
// clock fixed at t0, its options changed by edit.
func newLimiter(t testing.TB, edit ...func(*limiter.Options)) *limiter.Limiter {
	t.Helper()
	now := func() time.Time { return t0 }
	tree, err := descriptor.LoadFS(fstest.MapFS{"api.yaml": {Data: []byte(testYAML)}}, descriptor.Options{})
	if err != nil {
		t.Fatalf("loading config: %v", err)
	}
	opts := limiter.Options{
		Store:       memory.New(memory.Options{Now: now}),
		Tree:        func() *descriptor.Tree { return tree },
		HeaderStyle: limiter.HeadersXRateLimit,
		Now:         now,
	}
	for _, e := range edit {
		e(&opts)
	}
	l, err := limiter.New(opts)
	if err != nil {
		t.Fatalf("limiter.New: %v", err)
	}
	return l
}

// serve starts s on an in-memory listener and returns a connection to it.
func serve(t *testing.T, s *Server) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	s.Register(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dialing: %v", err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		<-done
	})
	return conn
}

func entries(kv ...string) []*ratelimitv3.RateLimitDescriptor_Entry {
	out := make([]*ratelimitv3.RateLimitDescriptor_Entry, len(kv))
	for i, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		out[i] = &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	return out
}

func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	return &ratelimitv3.RateLimitDescriptor{Entries: entries(kv...)}
}

// TestShouldRateLimitInvalid shows that a request the engine rejects, for
// its structure or its bounds (both tested in package limiter), and one
// this adapter cannot convert are answered InvalidArgument with the reason.
func TestShouldRateLimitInvalid(t *testing.T) {
	conn := serve(t, New(Options{Limiter: newLimiter(t, func(o *limiter.Options) { o.MaxDescriptors = 2 })}))
	client := rlsv3.NewRateLimitServiceClient(conn)
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"no domain", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k=v")}}, "invalid rate-limit request: empty domain"},
		{"empty key", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k=v"), desc("a=1", "=2")}}, "invalid rate-limit request: descriptors[1].entries[1]: empty key"},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k=v"), desc("k=v"), desc("k=v")}}, "invalid rate-limit request: 3 descriptors exceed the limit of 2"},
		{"override unit", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: entries("k=v"),
			Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1},
		}}}, "invalid rate-limit request: descriptors[0].limit: unit UNKNOWN not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.ShouldRateLimit(context.Background(), tt.req)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != tt.want {
				t.Errorf("error = %v %q, want InvalidArgument %q", st.Code(), st.Message(), tt.want)
			}
		})
	}
}

func TestShouldRateLimitAnswers(t *testing.T) {
	conn := serve(t, New(Options{Limiter: newLimiter(t), OmitDecisionMetadata: true}))
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()
	perKey := &rlsv3.RateLimitResponse_RateLimit{Name: "per_key", RequestsPerUnit: 2, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}
	reset50 := &durationpb.Duration{Seconds: 50}
	hdr := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, Value: v} }

	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want *rlsv3.RateLimitResponse
	}{
		{
			name: "statuses in order",
			req: &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				desc("other=x"), desc("api_key=a"), desc("free=1"), desc("tier=gold"),
			}},
			want: &rlsv3.RateLimitResponse{
				OverallCode: rlsv3.RateLimitResponse_OK,
				Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
					{Code: rlsv3.RateLimitResponse_OK},
					{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: perKey, LimitRemaining: 1, DurationUntilReset: reset50},
					{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: limiter.Unlimited},
					{
						Code: rlsv3.RateLimitResponse_OK,
						CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{
							RequestsPerUnit: 10, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE,
							UnitMultiplier: wrapperspb.UInt32(5),
						},
						LimitRemaining: 9,
						// The five-minute window is aligned to the epoch.
						DurationUntilReset: &durationpb.Duration{Seconds: 290},
					},
				},
				ResponseHeadersToAdd: []*corev3.HeaderValue{
					hdr("X-RateLimit-Limit", "2"), hdr("X-RateLimit-Remaining", "1"), hdr("X-RateLimit-Reset", "1767225660"),
				},
			},
		},
		{
			name: "over the limit",
			req: &rlsv3.RateLimitRequest{Domain: "api", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{
				desc("api_key=a"),
			}},
			want: &rlsv3.RateLimitResponse{
				OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
				// Rejected with one left: a single hit would pass.
				Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
					{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: perKey, LimitRemaining: 1, DurationUntilReset: reset50},
				},
				ResponseHeadersToAdd: []*corev3.HeaderValue{
					hdr("X-RateLimit-Limit", "2"), hdr("X-RateLimit-Remaining", "1"), hdr("X-RateLimit-Reset", "1767225660"),
					hdr("Retry-After", "50"), hdr("content-type", "application/json"),
				},
				RawBody: []byte(`{"code":429,"message":"rate limit exceeded","limit":2,"window":60,"retry_after_seconds":50,"reset_at":"2026-01-01T00:01:00Z"}`),
			},
		},
		{
			name: "descriptor hits_addend 0 checks only",
			req: &rlsv3.RateLimitRequest{Domain: "api", HitsAddend: 5, Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: entries("api_key=b"), HitsAddend: wrapperspb.UInt64(0)},
			}},
			want: &rlsv3.RateLimitResponse{
				OverallCode: rlsv3.RateLimitResponse_OK,
				Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
					// An empty window has nothing to reset.
					{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: perKey, LimitRemaining: 2, DurationUntilReset: &durationpb.Duration{}},
				},
				ResponseHeadersToAdd: []*corev3.HeaderValue{
					hdr("X-RateLimit-Limit", "2"), hdr("X-RateLimit-Remaining", "2"), hdr("X-RateLimit-Reset", "1767225610"),
				},
			},
		},
		{
			name: "override with multiplier",
			req: &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: entries("api_key=c"),
				Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{
					RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_HOUR, UnitMultiplier: wrapperspb.UInt32(2),
				},
				HitsAddend: wrapperspb.UInt64(3),
			}}},
			want: &rlsv3.RateLimitResponse{
				OverallCode: rlsv3.RateLimitResponse_OK,
				Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
					Code: rlsv3.RateLimitResponse_OK,
					CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{
						RequestsPerUnit: 7, Unit: rlsv3.RateLimitResponse_RateLimit_HOUR, UnitMultiplier: wrapperspb.UInt32(2),
					},
					LimitRemaining:     4,
					DurationUntilReset: &durationpb.Duration{Seconds: 2*3600 - 10},
				}},
				ResponseHeadersToAdd: []*corev3.HeaderValue{
					hdr("X-RateLimit-Limit", "7"), hdr("X-RateLimit-Remaining", "4"), hdr("X-RateLimit-Reset", "1767232800"),
				},
			},
		},
		{
			name: "refund",
			req: &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: entries("tier=silver"), IsNegativeHits: true},
			}},
			want: &rlsv3.RateLimitResponse{
				OverallCode: rlsv3.RateLimitResponse_OK,
				Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
					Code: rlsv3.RateLimitResponse_OK,
					CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{
						RequestsPerUnit: 10, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE, UnitMultiplier: wrapperspb.UInt32(5),
					},
					LimitRemaining:     10,
					DurationUntilReset: &durationpb.Duration{},
				}},
				ResponseHeadersToAdd: []*corev3.HeaderValue{
					hdr("X-RateLimit-Limit", "10"), hdr("X-RateLimit-Remaining", "10"), hdr("X-RateLimit-Reset", "1767225610"),
				},
			},
		},
		{
			name: "deny list",
			req: &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				desc("api_key=revoked_1"),
			}},
			want: &rlsv3.RateLimitResponse{
				OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
				Statuses:    []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OVER_LIMIT}},
				ResponseHeadersToAdd: []*corev3.HeaderValue{
					hdr("Retry-After", "1"), hdr("X-RateLimit-Policy", "denylist"), hdr("content-type", "application/json"),
				},
				RawBody: []byte(`{"code":429,"message":"request denied by policy","retry_after_seconds":1}`),
			},
		},
	}
	// The cases run in order against one engine: "over the limit" follows
	// the first hit of api_key=a.
	for _, tt := range tests {
		got, err := client.ShouldRateLimit(ctx, tt.req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if diff := cmpProto(got, tt.want); diff != "" {
			t.Errorf("%s: response differs:\n%s", tt.name, diff)
		}
	}
}

// cmpProto returns a readable difference between two messages, or "".
func cmpProto(got, want proto.Message) string {
	if proto.Equal(got, want) {
		return ""
	}
	return fmt.Sprintf(" got %v\nwant %v", prototext.Format(got), prototext.Format(want))
}

// checkerFunc adapts a function to Checker.
type checkerFunc func(context.Context, *limiter.Request) (*limiter.Response, error)

func (f checkerFunc) Check(ctx context.Context, r *limiter.Request) (*limiter.Response, error) {
	return f(ctx, r)
}

func TestShouldRateLimitErrors(t *testing.T) {
	valid := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k=v")}}
	tests := []struct {
		name     string
		check    checkerFunc
		wantCode codes.Code
		wantMsg  string
	}{
		{
			name: "invalid request from the engine",
			check: func(context.Context, *limiter.Request) (*limiter.Response, error) {
				return nil, fmt.Errorf("%w: bad", limiter.ErrInvalidRequest)
			},
			wantCode: codes.InvalidArgument,
			wantMsg:  "invalid rate-limit request: bad",
		},
		{
			name: "store unavailable",
			check: func(context.Context, *limiter.Request) (*limiter.Response, error) {
				return nil, fmt.Errorf("redis: %w", limiter.ErrUnavailable)
			},
			wantCode: codes.Unavailable,
			wantMsg:  "redis: store unavailable",
		},
		{
			name: "deadline",
			check: func(context.Context, *limiter.Request) (*limiter.Response, error) {
				return nil, context.DeadlineExceeded
			},
			wantCode: codes.DeadlineExceeded,
			wantMsg:  context.DeadlineExceeded.Error(),
		},
		{
			name:     "other error",
			check:    func(context.Context, *limiter.Request) (*limiter.Response, error) { return nil, errors.New("boom") },
			wantCode: codes.Internal,
			wantMsg:  "rate-limit check failed",
		},
		{
			name:     "panic",
			check:    func(context.Context, *limiter.Request) (*limiter.Response, error) { panic("boom") },
			wantCode: codes.Internal,
			wantMsg:  "internal error",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := rlsv3.NewRateLimitServiceClient(serve(t, New(Options{Limiter: tt.check})))
			_, err := client.ShouldRateLimit(context.Background(), valid)
			if st := status.Convert(err); st.Code() != tt.wantCode || st.Message() != tt.wantMsg {
				t.Errorf("error = %v %q, want %v %q", st.Code(), st.Message(), tt.wantCode, tt.wantMsg)
			}
		})
	}
}

func TestShouldRateLimitNoLimiter(t *testing.T) {
	_, err := New(Options{}).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("error = %v, want Unavailable", err)
	}
}

func TestShouldRateLimitEndedContext(t *testing.T) {
	called := false
	s := New(Options{Limiter: checkerFunc(func(context.Context, *limiter.Request) (*limiter.Response, error) {
		called = true
		return nil, nil
	})})
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	_, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k=v")}})
	if status.Code(err) != codes.DeadlineExceeded || called {
		t.Errorf("error = %v, engine called = %v; want DeadlineExceeded without calling the engine", err, called)
	}
}

func TestHealth(t *testing.T) {
	s := New(Options{Limiter: newLimiter(t)})
	client := healthpb.NewHealthClient(serve(t, s))
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health check %q: %v", service, err)
		}
		return resp.Status
	}
	for _, svc := range []string{"", ServiceName} {
		if got := check(svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q = %v, want SERVING", svc, got)
		}
	}
	s.SetServing(false)
	for _, svc := range []string{"", ServiceName} {
		if got := check(svc); got != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("after SetServing(false), health of %q = %v, want NOT_SERVING", svc, got)
		}
	}
	s.SetServing(true)
	if got := check(ServiceName); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("after SetServing(true), health = %v, want SERVING", got)
	}
}

func BenchmarkShouldRateLimit(b *testing.B) {
	one := []*ratelimitv3.RateLimitDescriptor{{Entries: entries("bench=client-1")}}
	cases := []struct {
		name  string
		opts  Options
		descs []*ratelimitv3.RateLimitDescriptor
	}{
		{"one descriptor", Options{}, one},
		{"three descriptors", Options{}, []*ratelimitv3.RateLimitDescriptor{
			{Entries: entries("bench=client-1")}, {Entries: entries("bench=client-2")}, {Entries: entries("other=o")},
		}},
		{"one descriptor without metadata", Options{OmitDecisionMetadata: true}, one},
		{"one descriptor with ratelimit's metadata", Options{ResponseDynamicMetadata: true}, one},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			opts := bc.opts
			opts.Limiter = newLimiter(b)
			s := New(opts)
			req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: bc.descs}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := s.ShouldRateLimit(ctx, req)
				if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
					b.Fatalf("ShouldRateLimit = %v, %v", resp, err)
				}
			}
		})
	}
}

func TestToProtoMany(t *testing.T) {
	// A Checker without CheckInto, answering more statuses and headers than
	// the preallocated block holds.
	hour := &descriptor.Limit{Name: "h", Unit: descriptor.Hour, UnitMultiplier: 3, RequestsPerUnit: 9}
	week := &descriptor.Limit{Unit: descriptor.Week, UnitMultiplier: 1, RequestsPerUnit: 70}
	headers := []limiter.Header{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}, {Key: "c", Value: "3"}, {Key: "d", Value: "4"}, {Key: "e", Value: "5"}, {Key: "f", Value: "6"}}
	answer := &limiter.Response{
		Code: limiter.OverLimit,
		Statuses: []limiter.Status{
			{Code: limiter.OK, Remaining: limiter.Unlimited},
			{Code: limiter.OverLimit, Limit: hour, Remaining: 0, ResetAfter: 1500 * time.Millisecond, RetryAfter: time.Second},
			{Code: limiter.OK},
			{Code: limiter.OK, Limit: week, Remaining: 69, ResetAfter: 7 * 24 * time.Hour},
		},
		Headers: headers,
		Body:    []byte(`{"code":429}`),
	}
	s := New(Options{Limiter: checkerFunc(func(context.Context, *limiter.Request) (*limiter.Response, error) { return answer, nil }), OmitDecisionMetadata: true})
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a=1"), desc("b=1"), desc("c=1"), desc("d=1")}}
	got, err := s.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: limiter.Unlimited},
			{
				Code:               rlsv3.RateLimitResponse_OVER_LIMIT,
				CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: "h", RequestsPerUnit: 9, Unit: rlsv3.RateLimitResponse_RateLimit_HOUR, UnitMultiplier: wrapperspb.UInt32(3)},
				DurationUntilReset: &durationpb.Duration{Seconds: 1, Nanos: 5e8},
			},
			{Code: rlsv3.RateLimitResponse_OK},
			{
				Code:               rlsv3.RateLimitResponse_OK,
				CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 70, Unit: rlsv3.RateLimitResponse_RateLimit_WEEK},
				LimitRemaining:     69,
				DurationUntilReset: &durationpb.Duration{Seconds: 7 * 24 * 3600},
			},
		},
		RawBody: []byte(`{"code":429}`),
	}
	for _, h := range headers {
		want.ResponseHeadersToAdd = append(want.ResponseHeadersToAdd, &corev3.HeaderValue{Key: h.Key, Value: h.Value})
	}
	if diff := cmpProto(got, want); diff != "" {
		t.Errorf("response differs:\n%s", diff)
	}
}
