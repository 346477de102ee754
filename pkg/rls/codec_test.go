package rls

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// checkWire returns what is wrong with resp as Codec sends it, or "": the
// bytes must decode to resp, and resp must be as it was.
func checkWire(resp *rlsv3.RateLimitResponse) string {
	want := proto.Clone(resp)
	md := resp.DynamicMetadata
	data, err := Codec().Marshal(resp)
	if err != nil {
		return "Codec().Marshal: " + err.Error()
	}
	defer data.Free()
	if resp.DynamicMetadata != md || !proto.Equal(resp, want) {
		return "Codec().Marshal changed the answer"
	}
	got := new(rlsv3.RateLimitResponse)
	if err := proto.Unmarshal(data.Materialize(), got); err != nil {
		return "decoding what Codec().Marshal wrote: " + err.Error()
	}
	if !proto.Equal(got, want) {
		return "decoded " + protojson.Format(got) + ", want " + protojson.Format(want)
	}
	return ""
}

func TestCodec(t *testing.T) {
	status := &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               rlsv3.RateLimitResponse_OVER_LIMIT,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: "per_key", RequestsPerUnit: 3, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE},
		DurationUntilReset: durationpb.New(1500000000),
	}
	headers := []*corev3.HeaderValue{{Key: "x-ratelimit-limit", Value: "3"}, {Key: "retry-after", Value: "2"}}
	tests := []struct {
		name string
		resp *rlsv3.RateLimitResponse
	}{
		{"no metadata", &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}},
		{"empty metadata", &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, DynamicMetadata: &structpb.Struct{}}},
		{"decisions", &rlsv3.RateLimitResponse{
			OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{status},
			ResponseHeadersToAdd: headers, RawBody: []byte(`{"code":429}`),
			DynamicMetadata: structOf(t, `{"tollgate": [{"rule": "per_key", "code": "OVER_LIMIT", "remaining": 0}, {"code": "OK"}]}`),
		}},
		{"every kind of value, and a quota", &rlsv3.RateLimitResponse{
			OverallCode: rlsv3.RateLimitResponse_OK,
			DynamicMetadata: structOf(t, `{"domain": "api", "hitsAddend": 2.5, "on": true, "off": false, "none": null,
				"metadata": {"cost": {"unit": "req", "of": [1, "a", [], {}, null, -0.5]}, "": ""}, "é": "ü"}`),
			Quota: &rlsv3.RateLimitResponse_Quota{Id: "q", Requests: 9},
		}},
		// Past grpc's pooling threshold, the buffer comes from its pool.
		{"large", &rlsv3.RateLimitResponse{
			OverallCode:     rlsv3.RateLimitResponse_OK,
			DynamicMetadata: structOf(t, `{"descriptors": [{"entries": ["k=`+strings.Repeat("v", 5000)+`"]}]}`),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if msg := checkWire(tt.resp); msg != "" {
				t.Error(msg)
			}
		})
	}
}

func TestCodecOtherMessages(t *testing.T) {
	c := Codec()
	if c.Name() != "proto" {
		t.Errorf("Name() = %q, want proto", c.Name())
	}
	in := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}
	data, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := new(healthpb.HealthCheckResponse)
	if err := c.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, out) {
		t.Errorf("round trip of %v gave %v", in, out)
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Error("Marshal of a string: no error")
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer{0xff}}, new(rlsv3.RateLimitRequest)); err == nil {
		t.Error("Unmarshal of a broken message: no error")
	}
}
