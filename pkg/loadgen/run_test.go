package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgatehq/tollgate/pkg/limiter"
)

// fakeRLS is a RateLimitService that decides by the value of the first
// entry of the first descriptor and counts what it answered.
type fakeRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer

	overLimit map[string]bool       // answer OVER_LIMIT
	fail      map[string]codes.Code // answer with this error
	hang      map[string]bool       // answer only when the call's deadline ends
	degraded  map[string]bool       // add X-RateLimit-Policy: degraded to the answer
	onCall    func(calls int)       // called after each call is counted

	mu        sync.Mutex
	calls     int
	ok, over  int
	degr      int // answers marked degraded
	errs      map[codes.Code]int
	byKey     map[string]int
	requests  []*rlsv3.RateLimitRequest
	keepFirst int // requests to keep for inspection
}

var _ rlsv3.RateLimitServiceServer = (*fakeRLS)(nil)

func (f *fakeRLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	key := ""
	if d := req.GetDescriptors(); len(d) > 0 && len(d[0].GetEntries()) > 0 {
		key = d[0].GetEntries()[0].GetValue()
	}
	f.mu.Lock()
	f.calls++
	calls := f.calls
	if f.byKey == nil {
		f.byKey = make(map[string]int)
		f.errs = make(map[codes.Code]int)
	}
	f.byKey[key]++
	if len(f.requests) < f.keepFirst {
		f.requests = append(f.requests, req)
	}
	code, fail := f.fail[key]
	switch {
	case f.hang[key]:
		f.errs[codes.DeadlineExceeded]++
	case fail:
		f.errs[code]++
	case f.overLimit[key]:
		f.over++
	default:
		f.ok++
	}
	if f.degraded[key] && !f.hang[key] && !fail {
		f.degr++
	}
	f.mu.Unlock()
	if f.onCall != nil {
		f.onCall(calls)
	}

	switch {
	case f.hang[key]:
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	case fail:
		return nil, status.Error(code, "refused by the fake")
	}
	overall := rlsv3.RateLimitResponse_OK
	if f.overLimit[key] {
		overall = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: overall}
	if f.degraded[key] {
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: "X-RateLimit-Remaining", Value: "3"},
			{Key: limiter.HeaderPolicy, Value: limiter.PolicyDegraded},
		}
	} else {
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: limiter.HeaderPolicy, Value: limiter.PolicyAllowlist}}
	}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:               overall,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: "fake", RequestsPerUnit: 10, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
			LimitRemaining:     3,
			DurationUntilReset: durationpb.New(time.Second),
		})
	}
	return resp, nil
}

// snapshot returns the fake's counts.
func (f *fakeRLS) snapshot() (calls, ok, over int, errs map[codes.Code]int, byKey map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	errs = make(map[codes.Code]int)
	for c, n := range f.errs {
		errs[c] = n
	}
	byKey = make(map[string]int)
	for k, n := range f.byKey {
		byKey[k] = n
	}
	return f.calls, f.ok, f.over, errs, byKey
}

// serve runs f on a loopback port until the test ends and returns its
// address.
func serve(t testing.TB, f *fakeRLS) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, f)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("fake server: %v", err)
		}
	})
	return lis.Addr().String()
}

// testContext bounds a test's run so that a bug cannot hang it.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestRunClosedLoopExactCount(t *testing.T) {
	f := &fakeRLS{overLimit: map[string]bool{"k1": true, "k3": true}, keepFirst: 1000}
	addr := serve(t, f)
	opts := Options{
		Addr: addr, Domain: "api",
		Descriptors: []string{"api_key=k{key},endpoint=/search", "tenant=t{key}"},
		Keys:        5, Requests: 300, Concurrency: 4, Conns: 2, Hits: 2, Seed: 7,
	}
	res, err := Run(testContext(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	calls, ok, over, errs, byKey := f.snapshot()
	if res.Requests != 300 || calls != 300 {
		t.Errorf("requests = %d, server calls = %d, want 300 and 300", res.Requests, calls)
	}
	if res.OK != int64(ok) || res.OverLimit != int64(over) || res.Errors != 0 || len(errs) != 0 {
		t.Errorf("ok, over_limit, errors = %d, %d, %d; server answered %d, %d, %v", res.OK, res.OverLimit, res.Errors, ok, over, errs)
	}
	if res.OverLimit == 0 || res.OK == 0 {
		t.Errorf("ok = %d, over_limit = %d: want both kinds of answer", res.OK, res.OverLimit)
	}
	if res.WarmupRequests != 0 || res.Mode != "closed" {
		t.Errorf("warmup_requests = %d, mode = %q, want 0 and closed", res.WarmupRequests, res.Mode)
	}
	l := res.Latency
	if !(l.P50 > 0 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max && l.Mean > 0) {
		t.Errorf("latency %+v is not ordered", l)
	}
	if res.DurationSeconds <= 0 || res.RPS <= 0 {
		t.Errorf("duration %g s, rps %g: want both positive", res.DurationSeconds, res.RPS)
	}
	if len(byKey) != 5 {
		t.Errorf("server saw keys %v, want k0 to k4", byKey)
	}

	// Template substitution: every request carries both descriptors for the
	// same key, the domain and the hits.
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, req := range f.requests {
		if req.GetDomain() != "api" || req.GetHitsAddend() != 2 || len(req.GetDescriptors()) != 2 {
			t.Fatalf("request %v: want domain api, hits 2, two descriptors", req)
		}
		first, second := entries(req.GetDescriptors()[0]), entries(req.GetDescriptors()[1])
		key, found := strings.CutPrefix(first[0], "api_key=k")
		n, err := strconv.Atoi(key)
		if !found || err != nil || n < 0 || n >= 5 {
			t.Fatalf("first entry %q: want api_key=k0 to k4", first[0])
		}
		want := fmt.Sprintf("[api_key=k%d endpoint=/search] [tenant=t%d]", n, n)
		if got := fmt.Sprintf("%v %v", first, second); got != want {
			t.Fatalf("descriptors %s, want %s", got, want)
		}
	}
}

func entries(d *ratelimitv3.RateLimitDescriptor) []string {
	var out []string
	for _, e := range d.GetEntries() {
		out = append(out, e.GetKey()+"="+e.GetValue())
	}
	return out
}

func TestRunWarmupIsNotRecorded(t *testing.T) {
	f := &fakeRLS{}
	addr := serve(t, f)
	res, err := Run(testContext(t), Options{
		Addr: addr, Domain: "api", Descriptors: []string{"k={key}"}, Keys: 3,
		Requests: 50, Warmup: 30 * time.Millisecond, Concurrency: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	calls, _, _, _, _ := f.snapshot()
	if res.Requests != 50 || int64(calls) != 50+res.WarmupRequests {
		t.Errorf("requests = %d, warm-up = %d, server calls = %d: want 50 recorded and calls = 50 + warm-up",
			res.Requests, res.WarmupRequests, calls)
	}
}

func TestRunKeyDistribution(t *testing.T) {
	run := func(dist string) map[string]int {
		f := &fakeRLS{}
		addr := serve(t, f)
		_, err := Run(testContext(t), Options{
			Addr: addr, Domain: "api", Descriptors: []string{"api_key=k{key}"},
			Keys: 20, Distribution: dist, Requests: 1000, Concurrency: 2,
		})
		if err != nil {
			t.Fatal(err)
		}
		_, _, _, _, byKey := f.snapshot()
		return byKey
	}
	uniform, zipf := run(Uniform), run(Zipf)
	// Uniform: about 50 per key. Zipf with s = 1.1 over 20 keys: key 0
	// about 31% (310), key 1 about 15%, key 15 about 1.4%.
	if zipf["k0"] < 3*uniform["k0"] {
		t.Errorf("k0 drawn %d times with zipf, %d with uniform: want zipf far more frequent", zipf["k0"], uniform["k0"])
	}
	if zipf["k0"] <= zipf["k1"] || zipf["k1"] <= zipf["k15"] {
		t.Errorf("zipf counts k0 %d, k1 %d, k15 %d: want decreasing", zipf["k0"], zipf["k1"], zipf["k15"])
	}
	if len(uniform) != 20 {
		t.Errorf("uniform reached %d of 20 keys", len(uniform))
	}
}

// TestRunKeyCounts counts every answer, warm-up included, under its key
// and the window it was sent in.
func TestRunKeyCounts(t *testing.T) {
	f := &fakeRLS{overLimit: map[string]bool{"k1": true}}
	addr := serve(t, f)
	res, err := Run(testContext(t), Options{
		Addr: addr, Domain: "api", Descriptors: []string{"api_key=k{key}"}, Keys: 3,
		Requests: 300, Warmup: 20 * time.Millisecond, Concurrency: 3, KeyWindow: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, _, byKey := f.snapshot()
	got := map[string]int{}
	var late int64
	for i, kc := range res.KeyCounts {
		if i > 0 && (kc.Key < res.KeyCounts[i-1].Key || kc.Key == res.KeyCounts[i-1].Key && kc.Start <= res.KeyCounts[i-1].Start) {
			t.Errorf("key counts out of order: %+v after %+v", kc, res.KeyCounts[i-1])
		}
		if kc.Start%time.Hour.Microseconds() != 0 || kc.First < kc.Start || kc.Last < kc.First ||
			kc.Last >= kc.Start+time.Hour.Microseconds() {
			t.Errorf("key count %+v: want an hour's window aligned to the epoch holding its first and last send", kc)
		}
		if kc.Key == 1 && kc.OK != 0 || kc.Key != 1 && kc.OverLimit != 0 {
			t.Errorf("key count %+v: key 1 is over its limit, the others are not", kc)
		}
		got[fmt.Sprintf("k%d", kc.Key)] += int(kc.OK + kc.OverLimit)
		late += kc.OKLate
	}
	if !maps.Equal(got, byKey) {
		t.Errorf("answers counted by key %v, the server's calls by key %v", got, byKey)
	}
	if late > 10 {
		t.Errorf("%d OK answers counted after their hour's window ended", late)
	}
	if b, _ := json.Marshal(res); !strings.Contains(string(b), `"key_window":"1h0m0s"`) {
		t.Errorf("JSON %s does not give the key window", b)
	}
}

// TestKeyCounter counts an OK answered after its window ended as late,
// in the window it was sent in.
func TestKeyCounter(t *testing.T) {
	c := &keyCounter{window: 1_000_000, counts: map[keyWindow]*KeyCount{}}
	at := func(us int64) time.Time { return time.UnixMicro(us) }
	ok, over := answer{overall: uint64(rlsv3.RateLimitResponse_OK)}, answer{overall: uint64(rlsv3.RateLimitResponse_OVER_LIMIT)}
	c.count(7, at(5_000_100), at(5_000_200), ok)
	c.count(7, at(5_999_900), at(6_000_100), ok) // decided in either window
	c.count(7, at(5_999_950), at(6_000_050), over)
	c.count(7, at(6_000_000), at(6_000_300), ok)
	c.count(2, at(5_500_000), at(5_500_100), ok)
	got := mergeKeyCounts([]*keyCounter{c, {window: 1_000_000, counts: map[keyWindow]*KeyCount{
		{7, 6_000_000}: {Key: 7, Start: 6_000_000, OK: 1, First: 6_400_000, Last: 6_400_000},
	}}})
	want := []KeyCount{
		{Key: 2, Start: 5_000_000, OK: 1, First: 5_500_000, Last: 5_500_000},
		{Key: 7, Start: 5_000_000, OK: 2, OverLimit: 1, OKLate: 1, First: 5_000_100, Last: 5_999_950},
		{Key: 7, Start: 6_000_000, OK: 2, First: 6_000_000, Last: 6_400_000},
	}
	if !slices.Equal(got, want) {
		t.Errorf("key counts =\n%+v\nwant\n%+v", got, want)
	}
}

func TestKeyChooser(t *testing.T) {
	const draws = 100000
	count := func(dist string, seed uint64) []int {
		next := newKeyChooser(Options{Keys: 100, Distribution: dist, ZipfS: 1.1, Seed: seed}, 3)
		n := make([]int, 100)
		for range draws {
			n[next()]++
		}
		return n
	}
	u := count(Uniform, 1)
	for k, n := range u {
		if n < 800 || n > 1200 {
			t.Errorf("uniform key %d drawn %d times, want about 1000", k, n)
		}
	}
	z := count(Zipf, 1)
	// P(k) ∝ (k+1)^-1.1: P(0)/P(1) = 2^1.1 ≈ 2.14.
	if ratio := float64(z[0]) / float64(z[1]); ratio < 1.9 || ratio > 2.4 {
		t.Errorf("zipf key 0 / key 1 = %.2f, want about 2.14", ratio)
	}
	if z[0] < 10*u[0] {
		t.Errorf("zipf key 0 drawn %d times, uniform %d: want at least 10 times as often", z[0], u[0])
	}
	if again := count(Zipf, 1); fmt.Sprint(again) != fmt.Sprint(z) {
		t.Error("the same seed gave a different key sequence")
	}
}

func TestRunOpenLoop(t *testing.T) {
	t.Run("duration", func(t *testing.T) {
		f := &fakeRLS{}
		addr := serve(t, f)
		const rate, slots = 2000, 300 // 150 ms
		res, err := Run(testContext(t), Options{
			Addr: addr, Domain: "api", Descriptors: []string{"k={key}"},
			Rate: rate, Duration: 150 * time.Millisecond, Concurrency: 4,
		})
		if err != nil {
			t.Fatal(err)
		}
		calls, _, _, _, _ := f.snapshot()
		if res.Mode != "open" || res.Requests+res.Unsent != slots || int64(calls) != res.Requests {
			t.Errorf("mode %s, requests %d + unsent %d, server calls %d: want open, %d slots, every request served",
				res.Mode, res.Requests, res.Unsent, calls, slots)
		}
		// The schedule bounds the rate from above whatever the machine's load.
		if res.RPS > rate*1.1 {
			t.Errorf("rps = %g, want at most the scheduled %d (+10%%)", res.RPS, rate)
		}
		t.Logf("rps %.0f, late %d, unsent %d, latency %+v", res.RPS, res.Late, res.Unsent, res.Latency)
	})
	t.Run("count", func(t *testing.T) {
		f := &fakeRLS{}
		addr := serve(t, f)
		res, err := Run(testContext(t), Options{
			Addr: addr, Domain: "api", Descriptors: []string{"k={key}"},
			Rate: 1000, Requests: 50, Warmup: 10 * time.Millisecond, Concurrency: 4,
		})
		if err != nil {
			t.Fatal(err)
		}
		calls, _, _, _, _ := f.snapshot()
		// Slots 10 to 59 are recorded; the last is due 49 ms after the warm-up.
		if res.Requests != 50 || res.WarmupRequests != 10 || calls != 60 || res.Unsent != 0 {
			t.Errorf("requests %d, warm-up %d, unsent %d, server calls %d: want 50, 10, 0, 60",
				res.Requests, res.WarmupRequests, res.Unsent, calls)
		}
		if res.DurationSeconds < 0.049 {
			t.Errorf("duration %gs: 50 requests at 1000/s cannot end before 49 ms", res.DurationSeconds)
		}
	})
}

func TestRunErrorsByCode(t *testing.T) {
	f := &fakeRLS{
		fail: map[string]codes.Code{"k1": codes.PermissionDenied, "k2": codes.Unavailable},
		hang: map[string]bool{"k3": true},
	}
	addr := serve(t, f)
	res, err := Run(testContext(t), Options{
		Addr: addr, Domain: "api", Descriptors: []string{"k=k{key}"}, Keys: 10,
		Requests: 60, Concurrency: 4, Timeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, ok, _, errs, _ := f.snapshot()
	want := map[string]int64{
		"PermissionDenied": int64(errs[codes.PermissionDenied]),
		"Unavailable":      int64(errs[codes.Unavailable]),
		"DeadlineExceeded": int64(errs[codes.DeadlineExceeded]),
	}
	for name, n := range want {
		if n == 0 {
			t.Fatalf("the fake never answered %s; pick other keys or a seed", name)
		}
		if res.ErrorsByCode[name] != n {
			t.Errorf("errors_by_code[%s] = %d, server sent %d", name, res.ErrorsByCode[name], n)
		}
	}
	wantErrors := want["PermissionDenied"] + want["Unavailable"] + want["DeadlineExceeded"]
	if res.Errors != wantErrors || res.OK != int64(ok) || res.Requests != 60 {
		t.Errorf("errors %d, ok %d, requests %d: want %d, %d, 60", res.Errors, res.OK, res.Requests, wantErrors, ok)
	}
}

func TestRunCountsDegraded(t *testing.T) {
	f := &fakeRLS{
		overLimit: map[string]bool{"k1": true, "k2": true},
		degraded:  map[string]bool{"k0": true, "k1": true},
		fail:      map[string]codes.Code{"k4": codes.Unavailable},
	}
	f.degraded["k4"] = true // a failed call is an error, not a degraded answer
	addr := serve(t, f)
	res, err := Run(testContext(t), Options{
		Addr: addr, Domain: "api", Descriptors: []string{"k=k{key}"}, Keys: 5,
		Requests: 200, Concurrency: 4, Seed: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	ok, over, degraded := f.ok, f.over, f.degr
	byKey := maps.Clone(f.byKey)
	f.mu.Unlock()
	if byKey["k0"] == 0 || byKey["k1"] == 0 || byKey["k4"] == 0 {
		t.Fatalf("keys drawn %v: want k0, k1 and k4; pick another seed", byKey)
	}
	if want := int64(byKey["k0"] + byKey["k1"]); res.Degraded != want || int64(degraded) != want {
		t.Errorf("degraded = %d, server marked %d, want %d (k0 and k1)", res.Degraded, degraded, want)
	}
	// Degraded answers still count as what they answered.
	if res.OK != int64(ok) || res.OverLimit != int64(over) || res.Errors != int64(byKey["k4"]) {
		t.Errorf("ok, over_limit, errors = %d, %d, %d; server answered %d, %d and %d errors",
			res.OK, res.OverLimit, res.Errors, ok, over, byKey["k4"])
	}
}

func TestRunConnectionRefused(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	res, err := Run(testContext(t), Options{Addr: addr, Domain: "api", Descriptors: []string{"k=v"}, Requests: 1})
	if err == nil || !strings.Contains(err.Error(), "connecting to "+addr) || res != nil {
		t.Errorf("Run = %v, %v; want no result and an error naming %s", res, err, addr)
	}
}

func TestRunInvalidOptions(t *testing.T) {
	_, err := Run(testContext(t), Options{Domain: "api"})
	if !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("Run error = %v, want ErrInvalidOptions", err)
	}
}

func TestRunInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	f := &fakeRLS{onCall: func(calls int) {
		if calls == 20 {
			cancel()
		}
	}}
	addr := serve(t, f)
	res, err := Run(ctx, Options{
		Addr: addr, Domain: "api", Descriptors: []string{"k={key}"}, Duration: 30 * time.Second, Concurrency: 2,
	})
	if !errors.Is(err, context.Canceled) || res == nil {
		t.Fatalf("Run = %v, %v; want a partial result and context.Canceled", res, err)
	}
	calls, _, _, _, _ := f.snapshot()
	if res.Requests < 1 || res.Requests > int64(calls) || res.Errors != 0 {
		t.Errorf("requests %d, errors %d after %d server calls: want 1 to %d requests, no errors",
			res.Requests, res.Errors, calls, calls)
	}
}

func TestRunResultJSONHasEveryField(t *testing.T) {
	f := &fakeRLS{}
	addr := serve(t, f)
	res, err := Run(testContext(t), Options{Addr: addr, Domain: "api", Descriptors: []string{"k={key}"}, Requests: 20})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{
		"mode", "requests", "duration_seconds", "rps", "ok", "over_limit", "errors", "errors_by_code",
		"overall_unknown", "degraded", "warmup_requests", "late", "unsent", "latency_us",
		"client_cpu_seconds", "client_cpu_us_per_request", "options",
	} {
		if _, ok := got[key]; !ok {
			t.Errorf("JSON %s has no %q", b, key)
		}
	}
	lat, _ := got["latency_us"].(map[string]any)
	for _, key := range []string{"p50", "p90", "p99", "p999", "max", "mean"} {
		if v, ok := lat[key].(float64); !ok || v <= 0 {
			t.Errorf("latency_us.%s = %v, want a positive number", key, lat[key])
		}
	}
	opts, _ := got["options"].(map[string]any)
	if opts["duration"] != "0s" || opts["timeout"] != "1s" || opts["concurrency"] != float64(DefaultConcurrency) {
		t.Errorf("options %v: want defaults filled in and durations as strings", opts)
	}
}
