package loadgen

import (
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// wantRequest builds the request for key the slow way: substitute, parse,
// and convert with rlsclient.
func wantRequest(t testing.TB, domain string, templates []string, hits uint32, key uint64) *rlsv3.RateLimitRequest {
	t.Helper()
	r := rlsclient.Request{Domain: domain, Hits: hits}
	for _, tmpl := range templates {
		entries, err := rlsclient.ParseDescriptor(strings.ReplaceAll(tmpl, keyPlaceholder, strconv.FormatUint(key, 10)))
		if err != nil {
			t.Fatal(err)
		}
		r.Descriptors = append(r.Descriptors, entries)
	}
	return r.Proto()
}

func TestEncodeMatchesProto(t *testing.T) {
	long := "long=" + strings.Repeat("x", 200) + "{key}"
	tests := []struct {
		name      string
		domain    string
		templates []string
		hits      uint32
		keys      int
	}{
		{name: "issue example", domain: "api", templates: []string{"api_key=k{key},endpoint=/search"}, keys: 1000},
		{name: "several descriptors and hits", domain: "api", hits: 3, keys: 100000,
			templates: []string{"api_key=k{key},endpoint=/search", "tenant=t{key}", "static=1"}},
		{name: "placeholder in key, twice in value, empty value", domain: "d", hits: 300, keys: 12,
			templates: []string{"{key}=v,a={key}-{key},b=,c=x{key}y"}},
		{name: "lengths over 127 bytes", domain: strings.Repeat("D", 130), keys: 1 << 40,
			templates: []string{long, long + "," + long}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			enc, err := newRequestEncoder(tt.domain, tt.templates, tt.hits, tt.keys)
			if err != nil {
				t.Fatal(err)
			}
			var digits [maxKeyDigits]byte
			for _, key := range []uint64{0, 1, 9, 10, 11, 99, 100, 12345, uint64(tt.keys - 1)} {
				if key >= uint64(tt.keys) {
					continue
				}
				got := enc.encode(key, digits[:0])
				want := wantRequest(t, tt.domain, tt.templates, tt.hits, key)
				wantWire, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(wantWire) {
					decoded := &rlsv3.RateLimitRequest{}
					derr := proto.Unmarshal(got, decoded)
					t.Fatalf("key %d: encoded %x (decodes to %v, %v), want %x (%v)", key, got, decoded, derr, wantWire, want)
				}
			}
		})
	}
}

func TestParseTemplateErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "empty descriptor"},
		{"api_key", `entry "api_key" is not key=value`},
		{"a=1,=2", `entry "=2" is not key=value`},
	}
	for _, tt := range tests {
		if _, err := parseTemplate(tt.in); err == nil || err.Error() != tt.want {
			t.Errorf("parseTemplate(%q) error = %v, want %q", tt.in, err, tt.want)
		}
	}
}

func TestDecodeAnswer(t *testing.T) {
	resp := &rlsv3.RateLimitResponse{
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code:               rlsv3.RateLimitResponse_OVER_LIMIT,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: "search", RequestsPerUnit: 3, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE},
			DurationUntilReset: durationpb.New(42e9),
		}},
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "x-ratelimit-limit", Value: "3"}},
		RawBody:              []byte("slow down"),
	}
	rest, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	full, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	withHeaders := func(code rlsv3.RateLimitResponse_Code, headers ...*corev3.HeaderValue) []byte {
		t.Helper()
		b, err := proto.Marshal(&rlsv3.RateLimitResponse{
			OverallCode:          code,
			ResponseHeadersToAdd: headers,
			RequestHeadersToAdd:  []*corev3.HeaderValue{{Key: policyHeader, Value: policyDegraded}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ok, over := uint64(rlsv3.RateLimitResponse_OK), uint64(rlsv3.RateLimitResponse_OVER_LIMIT)
	tests := []struct {
		name    string
		in      []byte
		want    answer
		wantErr bool
	}{
		{name: "full answer", in: full, want: answer{overall: over}},
		{name: "empty answer is UNKNOWN", in: nil, want: answer{}},
		{name: "code after other fields", in: append(rest, 0x08, 0x02), want: answer{overall: over}},
		{name: "no code", in: rest, want: answer{}},
		{name: "degraded OK", want: answer{overall: ok, degraded: true},
			in: withHeaders(rlsv3.RateLimitResponse_OK, &corev3.HeaderValue{Key: "X-RateLimit-Policy", Value: "degraded"})},
		{name: "degraded OVER_LIMIT among other headers, name in lower case", want: answer{overall: over, degraded: true},
			in: withHeaders(rlsv3.RateLimitResponse_OVER_LIMIT,
				&corev3.HeaderValue{Key: "x-ratelimit-policy", Value: "denylist"},
				&corev3.HeaderValue{Key: "x-ratelimit-policy", Value: "degraded"},
				&corev3.HeaderValue{Key: "Retry-After", Value: "1"})},
		{name: "degraded in raw_value", want: answer{overall: ok, degraded: true},
			in: withHeaders(rlsv3.RateLimitResponse_OK, &corev3.HeaderValue{Key: "X-RateLimit-Policy", RawValue: []byte("degraded")})},
		{name: "other policy", want: answer{overall: ok},
			in: withHeaders(rlsv3.RateLimitResponse_OK, &corev3.HeaderValue{Key: "X-RateLimit-Policy", Value: "allowlist"})},
		{name: "degraded under another name", want: answer{overall: ok},
			in: withHeaders(rlsv3.RateLimitResponse_OK, &corev3.HeaderValue{Key: "X-RateLimit-Policyx", Value: "degraded"})},
		{name: "value is case-sensitive", want: answer{overall: ok},
			in: withHeaders(rlsv3.RateLimitResponse_OK, &corev3.HeaderValue{Key: "X-RateLimit-Policy", Value: "Degraded"})},
		{name: "degraded only in request_headers_to_add", want: answer{overall: ok},
			in: withHeaders(rlsv3.RateLimitResponse_OK)},
		{name: "truncated", in: full[:len(full)-1], wantErr: true},
		{name: "bad tag", in: []byte{0x80}, wantErr: true},
		{name: "bad header", in: []byte{0x1a, 0x01, 0x80}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeAnswer(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("decodeAnswer error = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Errorf("decodeAnswer = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestPolicyConstants keeps the generator's copy of the degraded marker in
// step with the limiter's.
func TestPolicyConstants(t *testing.T) {
	if policyHeader != limiter.HeaderPolicy || policyDegraded != limiter.PolicyDegraded {
		t.Errorf("loadgen looks for %s: %s, the limiter sends %s: %s",
			policyHeader, policyDegraded, limiter.HeaderPolicy, limiter.PolicyDegraded)
	}
}

func TestCodecUnmarshalSplitBuffers(t *testing.T) {
	wire, err := proto.Marshal(&rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, RawBody: []byte("ok")})
	if err != nil {
		t.Fatal(err)
	}
	data := mem.BufferSlice{mem.SliceBuffer(wire[:3]), mem.SliceBuffer(wire[3:])}
	var x exchange
	if err := (wireCodec{}).Unmarshal(data, &x); err != nil {
		t.Fatal(err)
	}
	if x.answer != (answer{overall: uint64(rlsv3.RateLimitResponse_OK)}) {
		t.Errorf("answer = %+v, want OK", x.answer)
	}
	if _, err := (wireCodec{}).Marshal(&rlsv3.RateLimitRequest{}); err == nil {
		t.Error("Marshal of a proto message: want an error")
	}
}

// BenchmarkGeneratorPath measures the generator's own work per request,
// without gRPC: key choice, encoding, decoding the answer (a degraded one,
// with headers to read) and recording.
func BenchmarkGeneratorPath(b *testing.B) {
	o := Options{
		Domain:      "api",
		Descriptors: []string{"api_key=k{key},endpoint=/search", "tenant=t{key}"},
		Keys:        100000, Distribution: Zipf,
	}.withDefaults()
	enc, err := newRequestEncoder(o.Domain, o.Descriptors, o.Hits, o.Keys)
	if err != nil {
		b.Fatal(err)
	}
	answer, err := proto.Marshal(&rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 7}, {Code: rlsv3.RateLimitResponse_OK}},
		ResponseHeadersToAdd: []*corev3.HeaderValue{
			{Key: "X-RateLimit-Limit", Value: "100"}, {Key: "X-RateLimit-Remaining", Value: "7"},
			{Key: "X-RateLimit-Policy", Value: "degraded"},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	data := mem.BufferSlice{mem.SliceBuffer(answer)}
	shard := &histogramShard{h: newHistogram()}
	w := &worker{shard: shard, nextKey: newKeyChooser(o, 0)}
	var codec wireCodec
	b.ReportAllocs()
	for b.Loop() {
		w.x.request = enc.encode(w.nextKey(), w.digits[:0])
		if _, err := codec.Marshal(&w.x); err != nil {
			b.Fatal(err)
		}
		if err := codec.Unmarshal(data, &w.x); err != nil {
			b.Fatal(err)
		}
		w.record(shard, 1234, w.lastDone, w.x.answer, nil)
	}
	if w.degraded != int64(b.N) {
		b.Fatalf("%d of %d answers counted as degraded", w.degraded, b.N)
	}
}
