package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// budgetRules are token budgets of 1000 a year (a year, so that nothing
// refills or turns over while a test runs): domain "ai" charges always on
// every algorithm, as Envoy AI Gateway's flow needs; domain "mark" charges
// what is admitted, so reports must carry the tollgate.charge entry; domain
// "dflt" charges always through its defaults.
var budgetRules = map[string]string{"ai.yaml": `domain: ai
descriptors:
  - key: alg
    value: token_bucket
    descriptors:
      - key: tokens
        descriptors:
          - key: user
            rate_limit: {unit: year, requests_per_unit: 1000, algorithm: token_bucket, charge: always}
  - key: alg
    value: fixed_window
    descriptors:
      - key: tokens
        descriptors:
          - key: user
            rate_limit: {unit: year, requests_per_unit: 1000, algorithm: fixed_window, charge: always}
  - key: alg
    value: sliding_window_counter
    descriptors:
      - key: tokens
        descriptors:
          - key: user
            rate_limit: {unit: year, requests_per_unit: 1000, algorithm: sliding_window_counter, charge: always}
  - key: alg
    value: sliding_window_log
    descriptors:
      - key: tokens
        descriptors:
          - key: user
            rate_limit: {unit: year, requests_per_unit: 1000, algorithm: sliding_window_log, charge: always}
`, "mark.yaml": `domain: mark
descriptors:
  - key: user
    descriptors:
      - key: model
        rate_limit: {unit: year, requests_per_unit: 1000, algorithm: fixed_window}
`, "dflt.yaml": `domain: dflt
defaults:
  charge: always
descriptors:
  - key: user
    rate_limit: {unit: year, requests_per_unit: 1000, algorithm: fixed_window}
`}

// budgetAlgorithms are the algorithms whose counters a refund measures
// exactly. A sliding-window log past its limit keeps only its newest
// Requests+1 entries, so a refund after an overshoot is not exact there.
var budgetAlgorithms = []string{"token_bucket", "fixed_window", "sliding_window_counter"}

// marker is the entry that makes a descriptor's cost charged always.
const marker = "tollgate.charge"

// budgetServices starts tollgate on the memory store, Redis standalone and
// Redis Cluster, each serving budgetRules.
func budgetServices(t *testing.T) map[string]*service {
	t.Helper()
	files := budgetRules
	standalone := redistest.StartStandalone(t)
	cluster := redistest.StartCluster(t)
	return map[string]*service{
		"memory":     startService(t, files),
		"standalone": startService(t, files, countIn("single", []string{standalone.Addr}, "budget")),
		"cluster":    startService(t, files, countIn("cluster", cluster.Addrs(), "budget")),
	}
}

// call is one descriptor of a ShouldRateLimit call, in the exact shape
// Envoy sends: a per-descriptor hits_addend (a UInt64Value) and
// is_negative_hits for a refund.
type call struct {
	entries []string // key, value, key, value, ...
	hits    uint64
	refund  bool
}

// report is a descriptor charging hits.
func report(hits uint64, kv ...string) call { return call{entries: kv, hits: hits} }

// refund is a descriptor giving hits back.
func refund(hits uint64, kv ...string) call { return call{entries: kv, hits: hits, refund: true} }

// probe is a descriptor checking with cost 0.
func probe(kv ...string) call { return call{entries: kv} }

func (c call) proto() *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(c.hits), IsNegativeHits: c.refund}
	for i := 0; i+1 < len(c.entries); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: c.entries[i], Value: c.entries[i+1]})
	}
	return d
}

// send makes one ShouldRateLimit call with the given descriptors.
func (s *service) send(t *testing.T, domain string, calls ...call) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, c := range calls {
		req.Descriptors = append(req.Descriptors, c.proto())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rlsv3.NewRateLimitServiceClient(s.client.Conn()).ShouldRateLimit(ctx, req)
}

// want is what one call is expected to answer: the overall code, then
// per descriptor a code and, for OK, the remaining ("OK:400", "OVER").
type want struct {
	overall  string
	statuses []string
}

func expect(overall string, statuses ...string) want { return want{overall, statuses} }

// must makes a call and compares its answer with w.
func (s *service) must(t *testing.T, step, domain string, w want, calls ...call) {
	t.Helper()
	resp, err := s.send(t, domain, calls...)
	if err != nil {
		t.Fatalf("%s: ShouldRateLimit: %v", step, err)
	}
	if got := answer(resp); got != w.String() {
		t.Fatalf("%s: got %s, want %s", step, got, w)
	}
}

func (w want) String() string { return w.overall + " [" + strings.Join(w.statuses, " ") + "]" }

// answer formats resp as want.String does.
func answer(resp *rlsv3.RateLimitResponse) string {
	code := func(c rlsv3.RateLimitResponse_Code) string {
		if c == rlsv3.RateLimitResponse_OK {
			return "OK"
		}
		return "OVER"
	}
	var statuses []string
	for _, st := range resp.GetStatuses() {
		s := code(st.GetCode())
		if s == "OK" {
			s = fmt.Sprintf("OK:%d", st.GetLimitRemaining())
		}
		statuses = append(statuses, s)
	}
	return want{code(resp.GetOverallCode()), statuses}.String()
}

// TestTokenBudget replays, over gRPC on every store, the calls Envoy makes
// for token budgets: a check of cost 0 when a request arrives, a report of
// the tokens used when its stream ends, and the recipes built on them.
func TestTokenBudget(t *testing.T) {
	for storeName, svc := range budgetServices(t) {
		t.Run(storeName, func(t *testing.T) {
			t.Parallel()
			for _, alg := range append(budgetAlgorithms, "sliding_window_log") {
				t.Run("ai_gateway/"+alg, func(t *testing.T) { aiGatewayFlow(t, svc, alg) })
			}
			t.Run("marker", func(t *testing.T) { markerFlow(t, svc) })
			t.Run("mixed", func(t *testing.T) { mixedFlow(t, svc) })
			t.Run("domain_defaults", func(t *testing.T) { defaultsFlow(t, svc) })
			t.Run("true_up", func(t *testing.T) { trueUpFlow(t, svc) })
		})
	}
}

// aiGatewayFlow is Envoy AI Gateway's flow on a rule charged always: the
// check of cost 0, a report past the budget that still counts, the check
// that then fails, and one report of input, output and total tokens whose
// descriptors are each charged even when one overshoots.
func aiGatewayFlow(t *testing.T, svc *service, alg string) {
	total := func() []string { return []string{"alg", alg, "tokens", "total", "user", "u1"} }
	svc.must(t, "check", "ai", expect("OK", "OK:1000"), probe(total()...))
	svc.must(t, "report 600", "ai", expect("OK", "OK:400"), report(600, total()...))
	svc.must(t, "check", "ai", expect("OK", "OK:400"), probe(total()...))
	svc.must(t, "report 700 past the budget", "ai", expect("OVER", "OVER"), report(700, total()...))
	svc.must(t, "check past the budget", "ai", expect("OVER", "OVER"), probe(total()...))

	in := []string{"alg", alg, "tokens", "input", "user", "u2"}
	out := []string{"alg", alg, "tokens", "output", "user", "u2"}
	sum := []string{"alg", alg, "tokens", "total", "user", "u2"}
	svc.must(t, "report input, output and total", "ai", expect("OVER", "OVER", "OK:700", "OVER"),
		report(1200, in...), report(300, out...), report(1500, sum...))
	svc.must(t, "check each", "ai", expect("OVER", "OVER", "OK:700", "OVER"), probe(in...), probe(out...), probe(sum...))
	if alg == "sliding_window_log" {
		return
	}
	// Giving back exactly the overshoot leaves each counter at its limit,
	// where a check of cost 0 passes and one more hit does not.
	svc.must(t, "refund the overshoot", "ai", expect("OK", "OK:0", "OK:0"), refund(200, in...), refund(500, sum...))
	svc.must(t, "check at the limit", "ai", expect("OK", "OK:0", "OK:0"), probe(in...), probe(sum...))
	svc.must(t, "one more", "ai", expect("OVER", "OVER"), report(1, in...))
}

// markerFlow charges a rule of charge admitted through the tollgate.charge
// entry: admission keeps its free rejections, the marked reports count, at
// any position of the entry, on the same counter as the request's checks.
func markerFlow(t *testing.T, svc *service) {
	d := []string{"user", "m1", "model", "gpt"}
	svc.must(t, "admit 800", "mark", expect("OK", "OK:200"), report(800, d...))
	svc.must(t, "a rejected admission is free", "mark", expect("OVER", "OVER"), report(300, d...))
	svc.must(t, "marker first", "mark", expect("OK", "OK:199"), report(1, marker, "always", "user", "m1", "model", "gpt"))
	svc.must(t, "marker between", "mark", expect("OK", "OK:198"), report(1, "user", "m1", marker, "always", "model", "gpt"))
	svc.must(t, "marker last, past the limit", "mark", expect("OVER", "OVER"), report(300, "user", "m1", "model", "gpt", marker, "always"))
	svc.must(t, "admission past the limit", "mark", expect("OVER", "OVER"), probe(d...))
	svc.must(t, "refund the overshoot", "mark", expect("OK", "OK:0"), refund(102, d...))
	svc.must(t, "no room for one more", "mark", expect("OVER", "OVER"), probe(d...))

	for _, bad := range []string{"admitted", "Always", ""} {
		_, err := svc.send(t, "mark", report(1, "user", "m1", marker, bad, "model", "gpt"))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), marker) {
			t.Errorf("marker value %q: %v, want InvalidArgument naming %s", bad, err, marker)
		}
	}
}

// mixedFlow sends admitted and always-charged descriptors in one call: the
// always-charged ones are charged whatever happens, the admitted ones only
// when the whole call is admitted.
func mixedFlow(t *testing.T, svc *service) {
	a := []string{"user", "x1", "model", "a"}
	b := []string{"user", "x1", "model", "b"}
	bMarked := append(append([]string{}, b...), marker, "always")
	svc.must(t, "an overshooting report rejects the call", "mark", expect("OVER", "OK:1000", "OVER"),
		report(10, a...), report(1500, bMarked...))
	svc.must(t, "the admission was not charged, the report was", "mark", expect("OVER", "OK:1000", "OVER"), probe(a...), probe(b...))

	c := []string{"user", "x2", "model", "c"}
	dMarked := []string{"user", "x2", "model", "d", marker, "always"}
	svc.must(t, "a rejected admission does not stop a report", "mark", expect("OVER", "OVER", "OK:700"),
		report(1001, c...), report(300, dMarked...))
	svc.must(t, "after", "mark", expect("OK", "OK:1000", "OK:700"), probe(c...), probe(dMarked...))
}

// defaultsFlow charges always through the domain's defaults.
func defaultsFlow(t *testing.T, svc *service) {
	svc.must(t, "report past the budget", "dflt", expect("OVER", "OVER"), report(1200, "user", "d1"))
	svc.must(t, "refund the overshoot", "dflt", expect("OK", "OK:0"), refund(200, "user", "d1"))
}

// trueUpFlow is the estimate-then-true-up recipe: an admitted estimate when
// the request arrives, then one stream-done call that refunds the estimate
// and reports the tokens used, both marked, leaving exactly the tokens used.
func trueUpFlow(t *testing.T, svc *service) {
	d := []string{"user", "t1", "model", "gpt"}
	marked := append(append([]string{}, d...), marker, "always")
	svc.must(t, "estimate 300", "mark", expect("OK", "OK:700"), report(300, d...))
	svc.must(t, "true up to 450", "mark", expect("OK", "OK:1000", "OK:550"), refund(300, marked...), report(450, marked...))
	svc.must(t, "after", "mark", expect("OK", "OK:550"), probe(d...))

	svc.must(t, "estimate 300 more", "mark", expect("OK", "OK:250"), report(300, d...))
	svc.must(t, "true up past the budget", "mark", expect("OVER", "OK:550", "OVER"), refund(300, marked...), report(700, marked...))
	svc.must(t, "refund the overshoot", "mark", expect("OK", "OK:0"), refund(150, d...))
	svc.must(t, "no room for one more", "mark", expect("OVER", "OVER"), probe(d...))
}

// TestTokenBudgetRatelimitEnvironment starts tollgate from envoyproxy/
// ratelimit's environment, where the default charge is always, so a rule
// that names no charge counts an overshooting report as
// envoyproxy/ratelimit does.
func TestTokenBudgetRatelimitEnvironment(t *testing.T) {
	srv := redistest.StartStandalone(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "ratelimit", "config", "eg.yaml"), `domain: eg
descriptors:
  - key: generic_key
    value: default
    descriptors:
      - key: client
        rate_limit: {unit: year, requests_per_unit: 3}
`)
	// Port 0 everywhere: the ports come from the start-up log line, so no
	// other process can take them first.
	logs := startFromEnv(t, map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
		"USE_STATSD": "false", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr,
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	})
	var grpcAddr string
	polltest.EventuallyEvery(t, 10*time.Second, pollEvery, func() bool {
		grpcAddr = logValue(logs.String(), "tollgate serving", "grpc")
		return grpcAddr != ""
	}, "tollgate logs its addresses")
	client, err := rlsclient.Dial(grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	svc := &service{client: client}

	d := []string{"generic_key", "default", "client", "c1"}
	svc.must(t, "check", "eg", expect("OK", "OK:3"), probe(d...))
	svc.must(t, "report past the limit", "eg", expect("OVER", "OVER"), report(5, d...))
	svc.must(t, "check past the limit", "eg", expect("OVER", "OVER"), probe(d...))
	svc.must(t, "refund the overshoot", "eg", expect("OK", "OK:0"), refund(2, d...))
	svc.must(t, "a check at the limit passes", "eg", expect("OK", "OK:0"), probe(d...))
	if !strings.Contains(logs.String(), "charge always") {
		t.Errorf("the log does not say the default charge is always:\n%s", logs)
	}
}

// logValue returns the value of key in the first log line with message
// msg, or "".
func logValue(logs, msg, key string) string {
	for line := range strings.Lines(logs) {
		if !strings.Contains(line, `msg="`+msg+`"`) {
			continue
		}
		for field := range strings.FieldsSeq(line) {
			if v, ok := strings.CutPrefix(field, key+"="); ok {
				return v
			}
		}
	}
	return ""
}

// TestTokenBudgetNothingLost runs three instances on one Redis while many
// goroutines send random reports (marked, so charged always) and
// admissions of random cost on shared counters. Afterwards every counter
// must hold exactly the reports plus the admissions answered OK: no report
// dropped, no rejected admission charged.
func TestTokenBudgetNothingLost(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.StartStandalone(t)
		testNothingLost(t, "single", []string{srv.Addr})
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		testNothingLost(t, "cluster", c.Addrs())
	})
}

// lostRules count per algorithm in a year, so that nothing refills or
// turns over while the test runs.
const lostRules = `domain: lost
descriptors:
  - key: alg
    value: token_bucket
    descriptors:
      - key: user
        rate_limit: {unit: year, requests_per_unit: 500, algorithm: token_bucket}
  - key: alg
    value: fixed_window
    descriptors:
      - key: user
        rate_limit: {unit: year, requests_per_unit: 500, algorithm: fixed_window}
  - key: alg
    value: sliding_window_counter
    descriptors:
      - key: user
        rate_limit: {unit: year, requests_per_unit: 500, algorithm: sliding_window_counter}
`

func testNothingLost(t *testing.T, redisType string, addrs []string) {
	const (
		limit   = 500
		users   = 3
		workers = 8 // per instance
		calls   = 100
	)
	files := map[string]string{"lost.yaml": lostRules}
	useRedis := countIn(redisType, addrs, "lost")
	var fleet []*service
	for range 3 {
		fleet = append(fleet, startService(t, files, useRedis))
	}

	type counter struct{ alg, user string }
	var mu sync.Mutex
	charged := map[counter]uint64{}
	var wg sync.WaitGroup
	errs := make(chan error, len(fleet)*workers)
	for i, svc := range fleet {
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(w)))
				for range calls {
					c := counter{budgetAlgorithms[rng.IntN(len(budgetAlgorithms))], fmt.Sprint("u", rng.IntN(users))}
					kv := []string{"alg", c.alg, "user", c.user}
					isReport := rng.IntN(2) == 0
					hits := uint64(rng.IntN(40))
					if isReport {
						kv = append(kv, marker, "always")
					}
					resp, err := svc.send(t, "lost", report(hits, kv...))
					switch {
					case err != nil:
						errs <- err
						return
					case isDegraded(resp):
						errs <- errors.New("degraded answer: the store did not decide")
						return
					}
					if isReport || resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
						mu.Lock()
						charged[c] += hits
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// A counter that holds exactly what was charged, less the overshoot
	// refunded, stands at its limit: a check of cost 0 charged always
	// passes, and one charged on admission finds no room.
	svc := fleet[0]
	for c, sum := range charged {
		kv := []string{"alg", c.alg, "user", c.user}
		if sum <= limit {
			svc.must(t, fmt.Sprintf("%v holds %d", c, sum), "lost", expect("OK", fmt.Sprintf("OK:%d", limit-sum)), probe(kv...))
			continue
		}
		svc.must(t, fmt.Sprintf("%v: refund %d of %d", c, sum-limit, sum), "lost", expect("OK", "OK:0"), refund(sum-limit, kv...))
		svc.must(t, fmt.Sprintf("%v at its limit", c), "lost", expect("OK", "OK:0"), probe(append(kv, marker, "always")...))
		svc.must(t, fmt.Sprintf("%v has no room", c), "lost", expect("OVER", "OVER"), report(1, kv...))
	}
	t.Logf("%d counters, charged %v", len(charged), charged)
}
