package limiter

import (
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

const penaltyYAML = `
domain: api
descriptors:
  - key: client
    rate_limit:
      unit: minute
      requests_per_unit: 2
      algorithm: fixed_window
      penalty: {cooldown: 10s, factor: 3, max: 5m, forgive_after: 1h}
  - key: shadow
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
      algorithm: fixed_window
      penalty: {cooldown: 10s}
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 10, burst: 5}
`

// TestPenalty follows a client that ignores Retry-After through the
// limiter on an injected clock: a plain rejection, a strike that starts a
// cooldown with its header and body, a longer cooldown for sending
// through it, and an honest retry after it that is a plain rejection
// again. Another client is not affected.
func TestPenalty(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	f := newFixture(t, penaltyYAML, func(o *Options) {
		o.HeaderStyle = HeadersNone
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	c1 := req("api", d("client=c1"))
	type want struct {
		code      Code
		penalized bool
		retry     time.Duration
		headers   []Header
		body      string
	}
	ct := Header{HeaderContentType, "application/json"}
	pen := Header{HeaderPolicy, PolicyPenalty}
	steps := []struct {
		at   time.Duration // after t0, 00:00:10, 50 s before the window ends
		req  *Request
		want want
	}{
		{0, c1, want{code: OK}},
		{0, c1, want{code: OK}},
		{0, c1, want{code: OverLimit, retry: 50 * time.Second, headers: []Header{{HeaderRetryAfter, "50"}, ct},
			body: `{"code":429,"message":"rate limit exceeded","limit":2,"window":60,"retry_after_seconds":50,"reset_at":"2026-01-01T00:01:00Z"}`}},
		// Sent again within its Retry-After: a 10 s cooldown.
		{time.Second, c1, want{code: OverLimit, penalized: true, retry: 10 * time.Second,
			headers: []Header{{HeaderRetryAfter, "10"}, pen, ct},
			body:    `{"code":429,"message":"rate limit exceeded: requests sent while told to wait are blocked for a cooldown","penalty":true,"limit":2,"window":60,"retry_after_seconds":10,"reset_at":"2026-01-01T00:01:00Z"}`}},
		{time.Second, req("api", d("client=c2")), want{code: OK}},
		// Sent through the cooldown: the next one, 3 × 10 s.
		{2 * time.Second, c1, want{code: OverLimit, penalized: true, retry: 30 * time.Second,
			headers: []Header{{HeaderRetryAfter, "30"}, pen, ct},
			body:    `{"code":429,"message":"rate limit exceeded: requests sent while told to wait are blocked for a cooldown","penalty":true,"limit":2,"window":60,"retry_after_seconds":30,"reset_at":"2026-01-01T00:01:00Z"}`}},
		// Back when told: the window is still full, a plain rejection.
		{32 * time.Second, c1, want{code: OverLimit, retry: 18 * time.Second, headers: []Header{{HeaderRetryAfter, "18"}, ct},
			body: `{"code":429,"message":"rate limit exceeded","limit":2,"window":60,"retry_after_seconds":18,"reset_at":"2026-01-01T00:01:00Z"}`}},
		{50 * time.Second, c1, want{code: OK}},
		// A shadow rule's penalty never rejects, nor marks the answer.
		{50 * time.Second, req("api", d("shadow=s")), want{code: OK}},
		{50 * time.Second, req("api", d("shadow=s")), want{code: OK}},
		{51 * time.Second, req("api", d("shadow=s")), want{code: OK}},
	}
	for i, step := range steps {
		f.clock.Set(t0.Add(step.at))
		resp := f.check(t, step.req)
		st := resp.Statuses[0]
		got := want{code: resp.Code, penalized: st.Penalized, retry: st.RetryAfter, headers: resp.Headers, body: string(resp.Body)}
		if got.code != step.want.code || got.penalized != step.want.penalized || got.retry != step.want.retry || got.body != step.want.body {
			t.Fatalf("step %d at +%v: got %v penalized %t retry %v body %s\nwant %v penalized %t retry %v body %s",
				i, step.at, got.code, got.penalized, got.retry, got.body, step.want.code, step.want.penalized, step.want.retry, step.want.body)
		}
		assertHeaders(t, resp.Headers, step.want.headers)
	}
	sums, _ := collect(t, reader, "tollgate_decisions")
	penalized := int64(0)
	for attrs, n := range sums {
		if strings.Contains(attrs, "result=penalized") {
			penalized += n
		}
	}
	if penalized != 2 {
		t.Errorf("tollgate_decisions{result=penalized} = %d, want 2 (all: %v)", penalized, sums)
	}
}

// TestCostAboveCapacity: a request whose cost exceeds its limit's whole
// capacity is told it can never pass: no Retry-After, a body that says
// so, and a status that still shows the capacity.
func TestCostAboveCapacity(t *testing.T) {
	f := newFixture(t, penaltyYAML, func(o *Options) { o.HeaderStyle = HeadersXRateLimit })
	r := &Request{Domain: "api", Descriptors: []Descriptor{{Entries: entries("tb=1"), Hits: 16, HasHits: true}}}
	resp := f.check(t, r)
	st := resp.Statuses[0]
	if resp.Code != OverLimit || !st.Never || st.RetryAfter != 0 || st.Limit == nil || capacity(st.Limit) != 15 || st.Remaining != 15 {
		t.Fatalf("got %v, status %s never %t; want OverLimit, never, no retry, capacity and remaining 15", resp.Code, fmtStatus(st), st.Never)
	}
	assertHeaders(t, resp.Headers, []Header{
		{HeaderXLimit, "15"}, {HeaderXRemaining, "15"}, {HeaderXReset, "1767225610"},
		{HeaderContentType, "application/json"},
	})
	const body = `{"code":429,"message":"request cost exceeds the limit's capacity: it can never be admitted","limit":15,"window":1}`
	if string(resp.Body) != body {
		t.Errorf("Body = %s, want %s", resp.Body, body)
	}
	// A cost the capacity holds is the usual answer.
	r.Descriptors[0].Hits = 15
	if resp := f.check(t, r); resp.Code != OK {
		t.Fatalf("cost 15: %v %s", resp.Code, fmtStatus(resp.Statuses[0]))
	}
	r.Descriptors[0].Hits = 1
	if resp := f.check(t, r); resp.Code != OverLimit || resp.Statuses[0].Never || resp.Statuses[0].RetryAfter <= 0 {
		t.Fatalf("cost 1 on an empty bucket: %v %s never %t", resp.Code, fmtStatus(resp.Statuses[0]), resp.Statuses[0].Never)
	}
}
