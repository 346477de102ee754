package integration

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

const tracedRules = `domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10, name: per_key}
  - key: tier
    rate_limit: {unlimited: true}
`

// The descriptor values of the traced call: API keys, which no exported
// byte may carry.
const (
	tracedKey  = "sk_live_4f9a0c2e7d1b"
	tracedTier = "tier_value_3c8e5a"
)

// The trace context the traced call comes with, as Envoy would send it.
const (
	callerTrace = "0af7651916cd43dd8448eb211c80319c"
	callerSpan  = "b7ad6b7169203331"
)

// otlpReceiver is an OTLP/gRPC trace receiver on a loopback port that keeps
// every export it is sent.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer

	addr string
	// got is signalled after every export.
	got chan struct{}

	mu      sync.Mutex
	exports []*collectortrace.ExportTraceServiceRequest
}

// startOTLPReceiver serves a receiver until the test ends. It stops after
// the App, whose cleanup is registered later, so the App's final flush
// reaches it.
func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: lis.Addr().String(), got: make(chan struct{}, 1)}
	g := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(g, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	t.Cleanup(func() {
		g.Stop()
		<-done
	})
	return r
}

// Export keeps req.
func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	r.exports = append(r.exports, proto.Clone(req).(*collectortrace.ExportTraceServiceRequest))
	r.mu.Unlock()
	select {
	case r.got <- struct{}{}:
	default:
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// received returns every span received so far, by name, and every export
// in the wire format and in text.
func (r *otlpReceiver) received(t *testing.T) (map[string]*tracev1.Span, [][]byte) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	spans := map[string]*tracev1.Span{}
	var raw [][]byte
	for _, req := range r.exports {
		wire, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, wire, []byte(prototext.Format(req)))
		for _, rs := range req.GetResourceSpans() {
			if name := attrs(rs.GetResource().GetAttributes())["service.name"]; name != "tollgate" {
				t.Errorf("resource service.name = %q, want tollgate", name)
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					if spans[s.GetName()] != nil {
						t.Errorf("more than one span named %q", s.GetName())
					}
					spans[s.GetName()] = s
				}
			}
		}
	}
	return spans, raw
}

// waitForSpans waits until the receiver holds a span of every name, or
// fails the test after a deadline.
func (r *otlpReceiver) waitForSpans(t *testing.T, names ...string) (map[string]*tracev1.Span, [][]byte) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		spans, raw := r.received(t)
		missing := 0
		for _, n := range names {
			if spans[n] == nil {
				missing++
			}
		}
		if missing == 0 {
			return spans, raw
		}
		select {
		case <-r.got:
		case <-deadline:
			t.Fatalf("after 10 s the receiver holds spans %v, want %v", keys(spans), names)
		}
	}
}

const (
	rpcSpan      = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	decisionSpan = "limiter.Check"
	storeSpan    = "store.Apply"
)

// TestTracesReachOTLPReceiver sends a call with a traceparent to a tollgate
// exporting to an in-process OTLP receiver, and checks the exported spans:
// the RPC span under the caller's span, the decision under it, the store
// call under the decision, the attributes, and no descriptor value in any
// exported byte.
func TestTracesReachOTLPReceiver(t *testing.T) {
	recv := startOTLPReceiver(t)
	svc := startService(t, map[string]string{"api.yaml": tracedRules}, func(s *app.Settings) {
		s.Tracing.Endpoint = "http://" + recv.addr
		s.Tracing.BatchTimeout = 10 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	resp, err := svc.client.Query(ctx, rlsclient.Request{Domain: "api", Descriptors: [][]descriptor.Entry{
		{{Key: "api_key", Value: tracedKey}},
		{{Key: "tier", Value: tracedTier}},
	}})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if got := resp.GetOverallCode().String(); got != "OK" {
		t.Fatalf("overall code %s, want OK", got)
	}

	spans, raw := recv.waitForSpans(t, rpcSpan, decisionSpan, storeSpan)
	if len(spans) != 3 {
		t.Errorf("received spans %v, want only %v", keys(spans), []string{rpcSpan, decisionSpan, storeSpan})
	}
	rpc, decision, st := spans[rpcSpan], spans[decisionSpan], spans[storeSpan]
	for _, s := range []*tracev1.Span{rpc, decision, st} {
		if got := hex.EncodeToString(s.GetTraceId()); got != callerTrace {
			t.Errorf("span %s: trace %s, want the caller's %s", s.GetName(), got, callerTrace)
		}
	}
	for _, link := range []struct {
		child  *tracev1.Span
		parent []byte
		what   string
	}{
		{rpc, mustHex(t, callerSpan), "the caller's span"},
		{decision, rpc.GetSpanId(), "the RPC span"},
		{st, decision.GetSpanId(), "the decision span"},
	} {
		if !bytes.Equal(link.child.GetParentSpanId(), link.parent) {
			t.Errorf("span %s: parent %x, want %s %x", link.child.GetName(), link.child.GetParentSpanId(), link.what, link.parent)
		}
	}
	if rpc.GetKind() != tracev1.Span_SPAN_KIND_SERVER {
		t.Errorf("RPC span kind %v, want SERVER", rpc.GetKind())
	}
	for _, want := range []struct {
		span  *tracev1.Span
		attrs map[string]string
	}{
		{rpc, map[string]string{
			"rpc.system.name": "grpc", "rpc.method": rpcSpan, "rpc.response.status_code": "OK",
			"tollgate.domain": "api", "tollgate.descriptors": "2", "tollgate.code": "OK",
		}},
		{decision, map[string]string{
			"tollgate.domain": "api", "tollgate.descriptors": "2", "tollgate.code": "OK",
			"tollgate.rules": "[api_key tier]", "tollgate.limits": "[per_key ]", "tollgate.results": "[ok unlimited]",
			"tollgate.degraded": "false",
		}},
		{st, map[string]string{"tollgate.store": "primary", "tollgate.hits": "1"}},
	} {
		got := attrs(want.span.GetAttributes())
		for k, v := range want.attrs {
			if got[k] != v {
				t.Errorf("span %s: %s = %q, want %q (all: %v)", want.span.GetName(), k, got[k], v, got)
			}
		}
	}

	// The scan below finds what it looks for: the rule and limit names are
	// there, the descriptor values are not.
	for _, data := range raw {
		for _, secret := range []string{tracedKey, tracedTier} {
			if bytes.Contains(data, []byte(secret)) {
				t.Errorf("exported data carries the descriptor value %q", secret)
			}
		}
	}
	if !bytes.Contains(bytes.Join(raw, nil), []byte("per_key")) {
		t.Error("exported data lacks the limit name per_key; the value scan proves nothing")
	}
}

// TestTracesFlushedOnShutdown shows that spans still waiting for their
// batch when the App stops are exported before Run returns.
func TestTracesFlushedOnShutdown(t *testing.T) {
	recv := startOTLPReceiver(t)
	svc := startService(t, map[string]string{"api.yaml": tracedRules}, func(s *app.Settings) {
		s.Tracing.Endpoint = "http://" + recv.addr
		s.Tracing.BatchTimeout = time.Hour
	})
	svc.query(t, "api", []descriptor.Entry{{Key: "api_key", Value: tracedKey}})
	if spans, _ := recv.received(t); len(spans) != 0 {
		t.Fatalf("spans %v exported before the batch timeout", keys(spans))
	}
	if err := svc.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	spans, _ := recv.received(t)
	for _, name := range []string{rpcSpan, decisionSpan, storeSpan} {
		if spans[name] == nil {
			t.Errorf("span %s not exported by the time Run returned; got %v", name, keys(spans))
		}
	}
}

// attrs formats OTLP attributes by key; a list as "[a b]".
func attrs(kvs []*commonv1.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = anyValue(kv.GetValue())
	}
	return m
}

func anyValue(v *commonv1.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonv1.AnyValue_StringValue:
		return x.StringValue
	case *commonv1.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonv1.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonv1.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonv1.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, anyValue(e))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprintf("%v", v)
}

func keys(spans map[string]*tracev1.Span) []string {
	var out []string
	for k := range spans {
		out = append(out, k)
	}
	return out
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
