package rls

import (
	"context"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
)

// structOf parses the JSON object s into a Struct, or returns nil for "".
func structOf(t testing.TB, s string) *structpb.Struct {
	t.Helper()
	if s == "" {
		return nil
	}
	st := new(structpb.Struct)
	if err := protojson.Unmarshal([]byte(s), st); err != nil {
		t.Fatalf("parsing %s: %v", s, err)
	}
	return st
}

// assertMetadata fails t unless got equals the JSON object want ("" for
// none).
func assertMetadata(t testing.TB, got *structpb.Struct, want string) {
	t.Helper()
	w := structOf(t, want)
	if (got == nil) != (w == nil) || !proto.Equal(got, w) {
		t.Errorf("dynamic_metadata:\n got %s\nwant %s", protojson.Format(got), protojson.Format(w))
	}
}

func TestDecisionMetadata(t *testing.T) {
	over := &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_HOUR}
	tests := []struct {
		name  string
		opts  Options
		descs []*ratelimitv3.RateLimitDescriptor
		calls int // the answer to the last call is checked
		want  string
	}{
		{
			name:  "named limit, unnamed rule, unmatched",
			descs: []*ratelimitv3.RateLimitDescriptor{desc("api_key=k"), desc("tier=gold"), desc("nope=n")},
			calls: 1,
			want: `{"tollgate": [
				{"rule": "per_key", "code": "OK", "remaining": 1},
				{"rule": "tier", "code": "OK", "remaining": 9},
				{"code": "OK"}]}`,
		},
		{
			name:  "over the limit",
			descs: []*ratelimitv3.RateLimitDescriptor{desc("api_key=k")},
			calls: 3,
			want:  `{"tollgate": [{"rule": "per_key", "code": "OVER_LIMIT", "remaining": 0}]}`,
		},
		{
			name:  "deny list, unlimited, override",
			descs: []*ratelimitv3.RateLimitDescriptor{desc("api_key=revoked_9"), desc("free=f"), {Entries: entries("api_key=k"), Limit: over}},
			calls: 1,
			want: `{"tollgate": [
				{"rule": "api_key=revoked_*", "code": "OVER_LIMIT", "remaining": 0},
				{"rule": "free", "code": "OK", "remaining": 4294967295},
				{"code": "OK", "remaining": 7}]}`, // a deny list makes the other hits checks
		},
		{
			name:  "off",
			opts:  Options{OmitDecisionMetadata: true},
			descs: []*ratelimitv3.RateLimitDescriptor{desc("api_key=k")},
			calls: 1,
			want:  "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			opts.Limiter = newLimiter(t)
			s := New(opts)
			req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: tt.descs}
			var resp *rlsv3.RateLimitResponse
			for range tt.calls {
				var err error
				if resp, err = s.ShouldRateLimit(context.Background(), req); err != nil {
					t.Fatal(err)
				}
			}
			assertMetadata(t, resp.GetDynamicMetadata(), tt.want)
		})
	}
}

func TestDecisionMetadataBounds(t *testing.T) {
	long := &descriptor.Rule{Path: "k=" + strings.Repeat("é", 100)} // 202 bytes
	statuses := make([]limiter.Status, MaxDecisionDescriptors+3)
	for i := range statuses {
		statuses[i] = limiter.Status{Code: limiter.OK, Rule: long, Remaining: 1}
	}
	descs := newDecisions(statuses).root.GetFields()[DecisionKey].GetListValue().GetValues()
	if len(descs) != MaxDecisionDescriptors {
		t.Fatalf("%d descriptors described, want %d", len(descs), MaxDecisionDescriptors)
	}
	rule := descs[0].GetStructValue().GetFields()["rule"].GetStringValue()
	if want := "k=" + strings.Repeat("é", 63); rule != want {
		t.Errorf("rule = %q (%d bytes), want %q", rule, len(rule), want)
	}
}

// TestRatelimitMetadata checks envoyproxy/ratelimit's part of the
// metadata on answers made up for the purpose; TestRatelimitMetadataGolden
// compares real answers with its own.
func TestRatelimitMetadata(t *testing.T) {
	withMeta := func(path string, meta map[string]any) *descriptor.Rule {
		return &descriptor.Rule{Path: path, Metadata: meta}
	}
	a := withMeta("a", map[string]any{"team": "a", "tier": "gold", "cost": map[string]any{"unit": "req", "of": []any{1.0}}, "list": []any{"a"}})
	b := withMeta("b", map[string]any{"team": "b", "cost": map[string]any{"unit": "token", "weight": 3.0}, "list": []any{"b"}, "on": true})
	over := withMeta("over", map[string]any{"over": "yes"})
	unlimited := &descriptor.Rule{Path: "free", Unlimited: true, Metadata: map[string]any{"free": "yes"}}
	answer := &limiter.Response{Code: limiter.OverLimit, Statuses: []limiter.Status{
		{Code: limiter.OK, Rule: a},
		{Code: limiter.OverLimit, Rule: over},
		{Code: limiter.OK, Rule: b},
		{Code: limiter.OK, Rule: unlimited, Remaining: limiter.Unlimited},
		{Code: limiter.OK},
	}}
	s := New(Options{
		Limiter:                 checkerFunc(func(context.Context, *limiter.Request) (*limiter.Response, error) { return answer, nil }),
		ResponseDynamicMetadata: true,
		OmitDecisionMetadata:    true,
	})
	req := &rlsv3.RateLimitRequest{Domain: "api", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("a=1"),
		{Entries: entries("over=1", "sub=x"), HitsAddend: wrapperspb.UInt64(0)},
		{Entries: entries("b=1"), HitsAddend: wrapperspb.UInt64(5)},
		desc("free=1"),
		{Entries: entries("o=1"), Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{
			RequestsPerUnit: 42, Unit: typev3.RateLimitUnit_HOUR, UnitMultiplier: wrapperspb.UInt32(5)}},
	}}
	resp, err := s.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	assertMetadata(t, resp.GetDynamicMetadata(), `{
		"domain": "api",
		"hitsAddend": 2,
		"descriptors": [
			{"entries": ["a=1"]},
			{"entries": ["over=1", "sub=x"], "hitsAddend": 0},
			{"entries": ["b=1"], "hitsAddend": 5},
			{"entries": ["free=1"]},
			{"entries": ["o=1"], "limit": "requests_per_unit:42 unit:HOUR unit_multiplier:{value:5}"}
		],
		"metadata": {"team": "a", "tier": "gold", "on": true, "list": ["a"],
			"cost": {"unit": "req", "of": [1], "weight": 3}}
	}`)

	// Without hits or any rule's metadata, neither key is there.
	answer.Statuses = answer.Statuses[4:]
	req = &rlsv3.RateLimitRequest{Domain: "api", Descriptors: req.Descriptors[4:5]}
	req.Descriptors[0].Limit = nil
	if resp, err = s.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	assertMetadata(t, resp.GetDynamicMetadata(), `{"domain": "api", "descriptors": [{"entries": ["o=1"]}]}`)
}

// BenchmarkShouldRateLimitWire measures an answer as gRPC sends it,
// marshalled, with each part of the dynamic metadata, so that their cost
// compares within one run: by grpc's protobuf codec ("proto") and by the
// server's (Codec, "codec").
func BenchmarkShouldRateLimitWire(b *testing.B) {
	cases := []struct {
		name string
		opts Options
	}{
		{"no metadata", Options{OmitDecisionMetadata: true}},
		{"decisions", Options{}},
		{"decisions and ratelimit's", Options{ResponseDynamicMetadata: true}},
	}
	codecs := []struct {
		name  string
		codec encoding.CodecV2
	}{
		{"proto", encoding.GetCodecV2(grpcproto.Name)},
		{"codec", Codec()},
	}
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("bench=client-1")}}
	for _, bc := range cases {
		for _, cc := range codecs {
			b.Run(bc.name+"/"+cc.name, func(b *testing.B) {
				opts := bc.opts
				opts.Limiter = newLimiter(b)
				s := New(opts)
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					resp, err := s.ShouldRateLimit(ctx, req)
					if err != nil {
						b.Fatal(err)
					}
					data, err := cc.codec.Marshal(resp)
					if err != nil {
						b.Fatal(err)
					}
					data.Free()
				}
			})
		}
	}
}
