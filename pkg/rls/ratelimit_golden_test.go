package rls

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// update re-records testdata/ratelimit-metadata/golden.json from the
// envoyproxy/ratelimit binary named by $RATELIMIT_BIN; see the README.md
// beside it.
var update = flag.Bool("update", false, "re-record testdata/ratelimit-metadata/golden.json from $RATELIMIT_BIN")

const goldenDir = "testdata/ratelimit-metadata"

// metaStep is one request of the comparison, sent in order to the same
// counters.
type metaStep struct {
	name string
	req  *rlsv3.RateLimitRequest
}

// metaSteps returns the requests compared, each covering one rule of
// envoyproxy/ratelimit's metadata (meta.yaml holds the rules).
func metaSteps() []metaStep {
	d := func(kv ...string) *ratelimitv3.RateLimitDescriptor {
		return &ratelimitv3.RateLimitDescriptor{Entries: entries(kv...)}
	}
	hits := func(n uint64, kv ...string) *ratelimitv3.RateLimitDescriptor {
		return &ratelimitv3.RateLimitDescriptor{Entries: entries(kv...), HitsAddend: wrapperspb.UInt64(n)}
	}
	r := func(descs ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "meta", Descriptors: descs}
	}
	withHits := func(n uint32, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitRequest { req.HitsAddend = n; return req }
	override := d("plain=o")
	override.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 42, Unit: typev3.RateLimitUnit_HOUR}
	multiplied := d("plain=m")
	multiplied.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{
		RequestsPerUnit: 42, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(5)}
	return []metaStep{
		{"one limit with metadata", r(d("api_key=k1"))},
		{"nested descriptor, first value of a key wins", r(d("api_key=k1", "endpoint=/search"), d("api_key=k2"))},
		{"over the limit contributes nothing", withHits(2, r(d("api_key=k2"), d("tokens=u1")))},
		{"descriptor hits_addend", r(hits(40, "tokens=u2"), hits(0, "tokens=u3"))},
		{"request hits_addend", withHits(3, r(d("tokens=u4")))},
		{"quota mode passing", r(d("quota=q1"), d("plain=p1"))},
		{"quota mode over beside a passing limit", r(d("quota=q1"), d("plain=p1"))},
		{"quota mode all over", r(d("quota=q1"))},
		{"shadow mode over the limit", withHits(2, r(d("shadow=s1")))},
		{"unlimited", r(d("free=f"))},
		{"metadata of a node without a limit", r(d("parent=p", "child=c"))},
		{"detailed metric", r(d("detailed=x"))},
		{"value_to_metric on a wildcard", r(d("wild=w1"))},
		{"replaced limit", r(d("base=b"), d("premium=p"))},
		{"limit override", r(override)},
		{"limit override with a unit multiplier", r(multiplied)},
		{"no rule, empty value", r(d("nothing=n", "empty="))},
		{"no metadata at all", r(d("plain=p2"))},
		{"typed values, as YAML 1.1 reads them", r(d("typed=t"))},
		{"mappings merged recursively, else the first value wins", r(d("merge_a=x"), d("merge_b=y"))},
		{"a nested rule's mappings merged under the first", r(d("merge_a=x", "sub=s"), d("merge_a=x"), d("merge_b=y"))},
		{"unknown domain", &rlsv3.RateLimitRequest{Domain: "elsewhere", Descriptors: []*ratelimitv3.RateLimitDescriptor{d("api_key=k1")}}},
	}
}

// metaDifferences are the steps where tollgate deliberately answers other
// metadata than envoyproxy/ratelimit, with tollgate's.
var metaDifferences = map[string]string{
	// envoyproxy/ratelimit loses a rule's metadata when it rebuilds the
	// limit for detailed_metric, or for value_to_metric when the counted
	// value differs from the rule's; tollgate keeps it.
	"detailed metric":               `{"domain": "meta", "descriptors": [{"entries": ["detailed=x"]}], "metadata": {"kind": "detailed"}}`,
	"value_to_metric on a wildcard": `{"domain": "meta", "descriptors": [{"entries": ["wild=w1"]}], "metadata": {"kind": "wild"}}`,
	// envoyproxy/ratelimit's protos predate the override's unit_multiplier
	// and print it as an unknown field, 3:"\x08\x05"; tollgate names it.
	"limit override with a unit multiplier": `{"domain": "meta",
		"descriptors": [{"entries": ["plain=m"], "limit": "requests_per_unit:42 unit:MINUTE unit_multiplier:{value:5}"}]}`,
}

// metaAnswer is what the golden file records of one answer.
type metaAnswer struct {
	Name     string          `json:"name"`
	Code     string          `json:"code"`
	Codes    []string        `json:"codes"`
	Metadata json.RawMessage `json:"metadata"`
}

// answerOf records resp; the override's text has its spaces normalized,
// since the protobuf library's text output varies them on purpose.
func answerOf(t testing.TB, name string, resp *rlsv3.RateLimitResponse) metaAnswer {
	t.Helper()
	a := metaAnswer{Name: name, Code: resp.GetOverallCode().String()}
	for _, st := range resp.GetStatuses() {
		a.Codes = append(a.Codes, st.GetCode().String())
	}
	md := proto.Clone(resp.GetDynamicMetadata()).(*structpb.Struct)
	for _, d := range md.GetFields()["descriptors"].GetListValue().GetValues() {
		if l, ok := d.GetStructValue().GetFields()["limit"]; ok {
			l.Kind = &structpb.Value_StringValue{StringValue: strings.Join(strings.Fields(l.GetStringValue()), " ")}
		}
	}
	a.Metadata = canonicalJSON(t, md)
	return a
}

// canonicalJSON returns m as indented JSON with sorted keys, stable
// unlike protojson's output.
func canonicalJSON(t testing.TB, m proto.Message) json.RawMessage {
	t.Helper()
	raw, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(v, "    ", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// metaServer returns a tollgate Server over meta.yaml counting in st, with
// envoyproxy/ratelimit's metadata alone and fixed windows, as
// envoyproxy/ratelimit counts.
func metaServer(t testing.TB, st store.Store) *Server {
	t.Helper()
	tree, err := descriptor.Load(goldenDir, descriptor.Options{DefaultAlgorithm: algorithm.FixedWindow})
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(limiter.Options{
		Store: st, Tree: func() *descriptor.Tree { return tree }, DefaultAlgorithm: algorithm.FixedWindow,
	})
	if err != nil {
		t.Fatal(err)
	}
	return New(Options{Limiter: l, ResponseDynamicMetadata: true, OmitDecisionMetadata: true})
}

// runMeta sends every step to call and returns the answers.
func runMeta(t testing.TB, call func(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)) []metaAnswer {
	t.Helper()
	var out []metaAnswer
	for _, s := range metaSteps() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := call(ctx, s.req)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		out = append(out, answerOf(t, s.name, resp))
	}
	return out
}

// compareMeta fails t where got differs from the golden answers, allowing
// for metaDifferences.
func compareMeta(t *testing.T, who string, got, golden []metaAnswer) {
	t.Helper()
	if len(got) != len(golden) {
		t.Fatalf("%s: %d answers, golden has %d (re-record with -update)", who, len(got), len(golden))
	}
	for i, g := range got {
		w := golden[i]
		if g.Name != w.Name {
			t.Fatalf("answer %d is %q, golden's %q (re-record with -update)", i, g.Name, w.Name)
		}
		wantMeta := w.Metadata
		if d, ok := metaDifferences[g.Name]; ok {
			wantMeta = canonicalJSON(t, structOf(t, d))
			if bytes.Equal(canonicalJSON(t, structOf(t, string(w.Metadata))), wantMeta) {
				t.Errorf("%s: envoyproxy/ratelimit now answers as tollgate does; drop it from metaDifferences", g.Name)
			}
		}
		if g.Code != w.Code || strings.Join(g.Codes, ",") != strings.Join(w.Codes, ",") {
			t.Errorf("%s: %s answered %s %v, envoyproxy/ratelimit %s %v", g.Name, who, g.Code, g.Codes, w.Code, w.Codes)
		}
		if !bytes.Equal(g.Metadata, wantMeta) {
			t.Errorf("%s: %s's metadata\n%s\nwant\n%s", g.Name, who, g.Metadata, wantMeta)
		}
	}
}

// TestRatelimitMetadataGolden compares tollgate's envoyproxy/ratelimit
// metadata, field by field, with what envoyproxy/ratelimit answered to the
// same requests over the same rules (recorded in golden.json).
func TestRatelimitMetadataGolden(t *testing.T) {
	golden := filepath.Join(goldenDir, "golden.json")
	if *update {
		recordMeta(t, golden)
	}
	raw, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	var want []metaAnswer
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatalf("%s: %v", golden, err)
	}
	for i := range want {
		want[i].Metadata = canonicalJSON(t, structOf(t, string(want[i].Metadata)))
	}
	s := metaServer(t, memory.New(memory.Options{}))
	compareMeta(t, "tollgate", runMeta(t, s.ShouldRateLimit), want)
}

// recordMeta runs envoyproxy/ratelimit ($RATELIMIT_BIN) and tollgate side
// by side on one redis-server, writes the reference's answers to golden,
// and compares tollgate's with them.
func recordMeta(t *testing.T, golden string) {
	bin := os.Getenv("RATELIMIT_BIN")
	if bin == "" {
		t.Fatal("-update needs RATELIMIT_BIN, the path of an envoyproxy/ratelimit binary (go build ./src/service_cmd)")
	}
	rdb := redistest.StartStandalone(t)

	runtime := t.TempDir()
	rules, err := os.ReadFile(filepath.Join(goldenDir, "meta.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	confDir := filepath.Join(runtime, "ratelimit", "config")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "meta.yaml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	grpcPort, httpPort, debugPort := freePort(t), freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.Env = []string{
		"HOST=127.0.0.1", "PORT=" + httpPort, "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + grpcPort,
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + debugPort,
		"RUNTIME_ROOT=" + runtime, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
		"RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rdb.Addr, "CACHE_KEY_PREFIX=ref_",
		"RESPONSE_DYNAMIC_METADATA=true",
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("envoyproxy/ratelimit's output:\n%s", logs.String())
		}
	})
	conn, err := grpc.NewClient(net.JoinHostPort("127.0.0.1", grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ref := rlsv3.NewRateLimitServiceClient(conn)
	// Ready once it answers from its rules: an unknown domain has no
	// limit, so poll with one that exists and is not counted.
	probe := &rlsv3.RateLimitRequest{Domain: "meta", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: entries("free=probe")}}}
	if err := polltest.Poll(20*time.Second, 50*time.Millisecond, nil, func() error {
		pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
		defer pcancel()
		_, err := ref.ShouldRateLimit(pctx, probe)
		return err
	}); err != nil {
		t.Fatalf("envoyproxy/ratelimit did not answer: %v", err)
	}
	got := runMeta(t, func(ctx context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
		return ref.ShouldRateLimit(ctx, r)
	})
	out, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(golden, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}

	// tollgate beside it, on the same redis-server.
	client := goredis.NewClient(&goredis.Options{Addr: rdb.Addr})
	t.Cleanup(func() { client.Close() })
	st, err := redis.New(redis.Options{Client: client, KeyPrefix: "tg_meta"})
	if err != nil {
		t.Fatal(err)
	}
	compareMeta(t, "tollgate on redis", runMeta(t, metaServer(t, st).ShouldRateLimit), got)
}

// freePort returns a loopback port free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
