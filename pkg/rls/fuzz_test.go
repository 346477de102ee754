package rls

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// fuzzConfig holds the domains FuzzShouldRateLimit answers: every algorithm,
// allow and deny actions, shadow and quota mode, replaces, shared wildcard
// counters, unlimited rules and the three failure modes. The limits are
// small so that one request with a few repeated descriptors goes over them.
var fuzzConfig = fstest.MapFS{
	"api.yaml": {Data: []byte(`
domain: api
defaults:
  failure_mode: closed
descriptors:
  - key: api_key
    value: sk_internal_leaked
    action: deny
  - key: api_key
    value: sk_internal_*
    action: allow
  - key: api_key
    value: sk_revoked_*
    action: deny
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: token_bucket, burst: 2}
    metadata: {team: core, cost: {unit: request, tags: [a, 1]}, on: yes}
    descriptors:
      - key: endpoint
        value: /search
        metadata: {cost: {unit: search, weight: 2.5}, team: {nested: ~}}
        rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window_log}
      - key: endpoint
        value: /users
        rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window_counter}
  - key: client
    value: windowed
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: fixed_window}
  - key: client
    value: report
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 4, algorithm: fixed_window}
  - key: client
    value: layered
    failure_mode: local
    rate_limits:
      - {unit: second, requests_per_unit: 2}
      - {unit: day, requests_per_unit: 5, algorithm: fixed_window}
`)},
	"legacy.yaml": {Data: []byte(`
domain: legacy
descriptors:
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bar
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /api/*
    rate_limit: {name: api_paths, unit: second, requests_per_unit: 3}
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: plan
    value: bulk
    rate_limit:
      name: bulk
      unit: second
      requests_per_unit: 5
      replaces:
        - name: api_paths
  - key: path
    value: /healthz
    rate_limit: {unlimited: true}
  - key: user_agent
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: month, requests_per_unit: 2}
  - key: region
    value: eu-*-prod
    value_to_metric: true
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: sliding_window_counter}
`)},
	"tenants.yaml": {Data: []byte(`
domain: tenants
shard_by: tenant
defaults:
  failure_mode: open
  algorithm: sliding_window_log
descriptors:
  - key: tenant
    value: acme
    failure_mode: local
    rate_limits:
      - {unit: second, requests_per_unit: 5}
      - {unit: day, requests_per_unit: 10}
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: tenant
    failure_mode: closed
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: token_bucket}
    descriptors:
      - key: user
        rate_limit: {unit: week, requests_per_unit: 3, algorithm: fixed_window}
`)},
}

// FuzzShouldRateLimit decodes arbitrary bytes as a RateLimitRequest and
// answers it with a real engine over fuzzConfig: twice with a working store
// (the second answer sees the first one's counts), once with a store that is
// down. Every answer must be a response with one status per descriptor, each
// OK or OVER_LIMIT, or codes.InvalidArgument, and every answer must reach
// the wire through Codec as it is (checkWire). The server turns a panic into
// codes.Internal, so "never Internal" is what catches panics.
//
// Inputs the protobuf decoder rejects, such as strings with invalid UTF-8,
// are skipped: the gRPC server rejects them the same way before
// ShouldRateLimit.
func FuzzShouldRateLimit(f *testing.F) {
	tree, err := descriptor.LoadFS(fuzzConfig, descriptor.Options{})
	if err != nil {
		f.Fatalf("loading config: %v", err)
	}
	for _, req := range fuzzSeeds() {
		data, err := proto.Marshal(req)
		if err != nil {
			f.Fatalf("marshalling seed %v: %v", req, err)
		}
		f.Add(data)
	}
	// A domain with invalid UTF-8, which proto.Marshal refuses to write.
	f.Add(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "api\xff"))
	// A valid request followed by a field Envoy does not define.
	valid, _ := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api_key=k1")}})
	f.Add(protowire.AppendVarint(protowire.AppendTag(valid, 99, protowire.VarintType), 7))

	f.Fuzz(func(t *testing.T, data []byte) {
		req := new(rlsv3.RateLimitRequest)
		if proto.Unmarshal(data, req) != nil {
			return
		}
		var logs bytes.Buffer
		up, down := fuzzServers(t, tree, &logs)
		ctx := context.Background()
		for i, s := range []*Server{up, up, down} {
			resp, err := s.ShouldRateLimit(ctx, req)
			msg := checkAnswer(req, resp, err)
			if msg == "" && err == nil {
				msg = checkWire(resp)
			}
			if msg != "" {
				t.Fatalf("answer %d: %s\nrequest: %s\nlogs:\n%s", i, msg, prototext.Format(req), logs.String())
			}
		}
	})
}

// fuzzServers returns two servers over tree that log to logs: up counts in
// the memory store; down's store fails, and its rules of failure mode local
// fall back to a memory store.
func fuzzServers(t *testing.T, tree *descriptor.Tree, logs *bytes.Buffer) (up, down *Server) {
	now := func() time.Time { return t0 }
	log := slog.New(slog.NewTextHandler(logs, nil))
	newServer := func(st, fallback store.Store) *Server {
		l, err := limiter.New(limiter.Options{
			Store:         st,
			Tree:          func() *descriptor.Tree { return tree },
			HeaderStyle:   limiter.HeadersXRateLimit,
			Fallback:      fallback,
			FallbackShare: 3,
			Now:           now,
			Logger:        log,
			// Any hits_addend reaches the counting, whose cost
			// arithmetic must hold for all of them; the limiter's
			// tests cover the bound.
			MaxDescriptors: 16, MaxEntries: 8, MaxKeyLen: 64, MaxValueLen: 256, MaxHits: math.MaxUint64,
		})
		if err != nil {
			t.Fatalf("limiter.New: %v", err)
		}
		return New(Options{Limiter: l, Logger: log, ResponseDynamicMetadata: true})
	}
	up = newServer(memory.New(memory.Options{MaxKeys: 10000, Now: now}), nil)
	down = newServer(storetest.Failing{Err: store.ErrUnavailable}, memory.New(memory.Options{MaxKeys: 1000, Now: now}))
	return up, down
}

// FuzzJSON posts arbitrary bytes to envoyproxy/ratelimit's POST /json,
// twice to a server over the memory store and once to one whose store is
// down, as FuzzShouldRateLimit does over gRPC. Every answer must be one of:
//
//   - 400 with a plain-text reason (the endpoint's errors are plain text, as
//     envoyproxy/ratelimit's are);
//   - 200 or 429 with a RateLimitResponse in the protobuf JSON mapping,
//     holding one status per descriptor of the request, each OK or
//     OVER_LIMIT, and 429 exactly when the overall code is OVER_LIMIT;
//   - 503 with a plain-text reason, only from the server whose store is
//     down.
//
// The seeds are FuzzShouldRateLimit's requests in the JSON mapping, and
// JSON the mapping refuses or reads leniently.
func FuzzJSON(f *testing.F) {
	tree, err := descriptor.LoadFS(fuzzConfig, descriptor.Options{})
	if err != nil {
		f.Fatalf("loading config: %v", err)
	}
	for _, req := range fuzzSeeds() {
		data, err := protojson.Marshal(req)
		if err != nil {
			f.Fatalf("marshalling seed %v: %v", req, err)
		}
		f.Add(data)
	}
	for _, seed := range []string{
		`{"domain":"api","hits_addend":2,"descriptors":[{"entries":[{"key":"client","value":"windowed"}],"hitsAddend":"7","isNegativeHits":true}]}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k"}],"limit":{"requestsPerUnit":1,"unit":"HOUR","unitMultiplier":0}}]}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k"}],"limit":{"unit":"FORTNIGHT"}}]}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k"}]}],"domain":"legacy"}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k"}]}],"unknown":1}`,
		`{"domain":"api","hitsAddend":-1}`,
		`{"domain":"api","descriptors":[null]}`,
		`{"domain":"\ud800","descriptors":[{"entries":[{"key":"api_key","value":"k"}]}]}`,
		`{"domain":"api"} {}`,
		`null`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var logs bytes.Buffer
		up, down := fuzzServers(t, tree, &logs)
		for i, s := range []*Server{up, up, down} {
			rec := httptest.NewRecorder()
			s.JSONHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/json", bytes.NewReader(body)))
			if msg := checkJSONAnswer(body, rec, s == down); msg != "" {
				t.Fatalf("answer %d: %s\nbody: %q\nanswer: %d %s\nlogs:\n%s", i, msg, body, rec.Code, rec.Body, logs.String())
			}
		}
	})
}

// checkJSONAnswer returns what is wrong with the answer rec to a POST /json
// of body, or "". storeDown allows the 503 of a store that fails.
func checkJSONAnswer(body []byte, rec *httptest.ResponseRecorder, storeDown bool) string {
	switch rec.Code {
	case http.StatusBadRequest, http.StatusServiceUnavailable:
		if rec.Code == http.StatusServiceUnavailable && !storeDown {
			return "503 from the memory store"
		}
		if !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") || strings.TrimSpace(rec.Body.String()) == "" {
			return "error without a plain-text reason"
		}
		return ""
	case http.StatusOK, http.StatusTooManyRequests:
	default:
		return "unexpected status"
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		return "Content-Type " + ct
	}
	req := new(rlsv3.RateLimitRequest)
	if err := protojson.Unmarshal(body, req); err != nil {
		return "accepted a body that does not decode: " + err.Error()
	}
	resp := new(rlsv3.RateLimitResponse)
	if err := protojson.Unmarshal(rec.Body.Bytes(), resp); err != nil {
		return "answer is not a RateLimitResponse: " + err.Error()
	}
	if over := resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT; over != (rec.Code == http.StatusTooManyRequests) {
		return "the HTTP status does not match the overall code"
	}
	return checkAnswer(req, resp, nil)
}

// checkAnswer returns what is wrong with an answer to req, or "".
func checkAnswer(req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse, err error) string {
	if err != nil {
		if c := status.Code(err); c != codes.InvalidArgument {
			return fmt.Sprintf("error %v, want codes.InvalidArgument or an answer", err)
		}
		return ""
	}
	valid := func(c rlsv3.RateLimitResponse_Code) bool {
		return c == rlsv3.RateLimitResponse_OK || c == rlsv3.RateLimitResponse_OVER_LIMIT
	}
	switch {
	case resp == nil:
		return "nil response and nil error"
	case !valid(resp.GetOverallCode()):
		return fmt.Sprintf("overall code %v", resp.GetOverallCode())
	case len(resp.GetStatuses()) != len(req.GetDescriptors()):
		return fmt.Sprintf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
	}
	for i, st := range resp.GetStatuses() {
		if !valid(st.GetCode()) {
			return fmt.Sprintf("statuses[%d]: code %v", i, st.GetCode())
		}
	}
	return ""
}

// fuzzSeeds returns realistic and edge-case requests for fuzzConfig.
func fuzzSeeds() []*rlsv3.RateLimitRequest {
	type descs = []*ratelimitv3.RateLimitDescriptor
	override := func(d *ratelimitv3.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit, mult *wrapperspb.UInt32Value) *ratelimitv3.RateLimitDescriptor {
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit, UnitMultiplier: mult}
		return d
	}
	hits := func(d *ratelimitv3.RateLimitDescriptor, n uint64, refund bool) *ratelimitv3.RateLimitDescriptor {
		d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(n), refund
		return d
	}
	many := make(descs, 17)
	for i := range many {
		many[i] = desc("client=windowed")
	}
	return []*rlsv3.RateLimitRequest{
		// Realistic requests, one per kind of rule.
		{Domain: "api", Descriptors: descs{desc("api_key=k1"), desc("api_key=k1", "endpoint=/search")}},
		{Domain: "api", Descriptors: descs{desc("api_key=k1", "endpoint=/users"), desc("api_key=sk_internal_x"), desc("api_key=sk_revoked_y")}},
		{Domain: "api", Descriptors: descs{desc("client=windowed"), desc("client=report"), desc("client=layered"), desc("client=layered")}},
		{Domain: "legacy", Descriptors: descs{desc("path=/api/v1"), desc("plan=bulk"), desc("path=/files/a"), desc("path=/files/b")}},
		{Domain: "legacy", Descriptors: descs{desc("source_cluster=proxy", "destination_cluster=bar"), desc("path=/healthz"), desc("user_agent=curl"), desc("user_agent=curl")}},
		{Domain: "legacy", HitsAddend: 2, Descriptors: descs{desc("quota=q"), desc("region=eu-west-1-prod"), desc("quota=q")}},
		{Domain: "tenants", Descriptors: descs{desc("tenant=acme"), desc("tenant=acme", "user=u1")}},
		{Domain: "tenants", Descriptors: descs{desc("tenant=t2"), desc("tenant=t2", "user=u1"), desc("tenant=t2", "user=u1", "extra=x")}},
		// Hits: huge, zero, refunds.
		{Domain: "api", HitsAddend: math.MaxUint32, Descriptors: descs{desc("client=windowed"), desc("api_key=k1")}},
		{Domain: "api", Descriptors: descs{hits(desc("client=layered"), math.MaxUint64, false), hits(desc("api_key=k1", "endpoint=/search"), math.MaxInt64+1, false)}},
		{Domain: "api", Descriptors: descs{hits(desc("client=windowed"), 0, false), hits(desc("client=windowed"), math.MaxUint64, true)}},
		{Domain: "tenants", Descriptors: descs{hits(desc("tenant=acme"), 3, true), hits(desc("tenant=t3", "user=u"), 1<<40, true)}},
		// Overrides: valid, unknown and out-of-range units, zero and huge values.
		{Domain: "api", Descriptors: descs{override(desc("api_key=k2"), 1, typev3.RateLimitUnit_SECOND, nil), override(desc("nomatch=x"), 0, typev3.RateLimitUnit_YEAR, wrapperspb.UInt32(math.MaxUint32))}},
		{Domain: "legacy", Descriptors: descs{override(desc("path=/files/x"), math.MaxUint32, typev3.RateLimitUnit_DAY, wrapperspb.UInt32(0))}},
		{Domain: "api", Descriptors: descs{override(desc("api_key=k3"), 5, typev3.RateLimitUnit_UNKNOWN, nil)}},
		{Domain: "api", Descriptors: descs{override(desc("api_key=k3"), 5, typev3.RateLimitUnit(99), nil)}},
		// Malformed requests.
		{Domain: "", Descriptors: descs{desc("api_key=k1")}},
		{Domain: "api"},
		{Domain: "api", Descriptors: descs{desc("api_key=k1"), {}}},
		{Domain: "api", Descriptors: descs{desc("=v")}},
		{Domain: "api", Descriptors: descs{desc(strings.Repeat("k", 65) + "=v")}},
		{Domain: "api", Descriptors: descs{desc("k=" + strings.Repeat("v", 257))}},
		{Domain: strings.Repeat("d", 65), Descriptors: descs{desc("k=v")}},
		{Domain: "api", Descriptors: many},
		{Domain: "api", Descriptors: many[:16]},
		// Unknown domains, unmatched and odd entries.
		{Domain: "nope", Descriptors: descs{desc("api_key=k1")}},
		{Domain: "api", Descriptors: descs{desc("api_key="), desc("api_key=\x00"), desc("api_key=*"), desc("api_key=sk_internal_leaked")}},
		{Domain: "legacy", Descriptors: descs{desc("path=/api/*"), desc("path=/files/*", "path=/files/*"), desc("region=eu--prod")}},
	}
}
