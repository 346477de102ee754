package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// t0 is ten seconds into a minute, so a fixed one-minute window resets 50
// seconds later, at t0Reset.
var t0 = time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)

const (
	t0Unix  = "1767225610" // Unix seconds of t0
	t0Reset = "1767225660" // Unix seconds of 2026-01-01T00:01:00Z
)

// loadTree builds a tree from YAML files separated by "---" lines.
func loadTree(t testing.TB, yaml string) *descriptor.Tree {
	t.Helper()
	fsys := fstest.MapFS{}
	for i, doc := range strings.Split(yaml, "\n---\n") {
		fsys[fmt.Sprintf("config%d.yaml", i)] = &fstest.MapFile{Data: []byte(doc)}
	}
	tree, err := descriptor.LoadFS(fsys, descriptor.Options{})
	if err != nil {
		t.Fatalf("loading config: %v", err)
	}
	return tree
}

// recorder counts in a memory store and keeps a copy of every batch.
type recorder struct {
	inner   store.Store
	mu      sync.Mutex
	batches [][]store.Hit
	err     error // returned instead of counting when set
}

func (r *recorder) Apply(ctx context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	r.mu.Lock()
	batch := make([]store.Hit, len(hits))
	for i, h := range hits {
		h.Entries = append([]store.Entry(nil), h.Entries...)
		batch[i] = h
	}
	r.batches = append(r.batches, batch)
	err := r.err
	r.mu.Unlock()
	if err != nil {
		return err
	}
	return r.inner.Apply(ctx, hits, verdicts)
}

type fixture struct {
	lim   *Limiter
	clock *storetest.Clock
	store *recorder
}

// newFixture returns a limiter over yaml with a memory store, the test
// clock at t0 and X-RateLimit headers; edit changes the options.
func newFixture(t testing.TB, yaml string, edit func(*Options)) *fixture {
	t.Helper()
	clk := storetest.NewClock(t0)
	rec := &recorder{inner: memory.New(memory.Options{Now: clk.Now})}
	tree := loadTree(t, yaml)
	opts := Options{
		Store:       rec,
		Tree:        func() *descriptor.Tree { return tree },
		HeaderStyle: HeadersXRateLimit,
		Now:         clk.Now,
	}
	if edit != nil {
		edit(&opts)
	}
	l, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &fixture{lim: l, clock: clk, store: rec}
}

func (f *fixture) check(t testing.TB, req *Request) *Response {
	t.Helper()
	resp, err := f.lim.Check(context.Background(), req)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return resp
}

// req builds a request of one descriptor per entry list, each given as
// "key=value" strings.
func req(domain string, descs ...[]string) *Request {
	r := &Request{Domain: domain}
	for _, d := range descs {
		r.Descriptors = append(r.Descriptors, Descriptor{Entries: entries(d...)})
	}
	return r
}

func entries(kv ...string) []descriptor.Entry {
	out := make([]descriptor.Entry, len(kv))
	for i, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		out[i] = descriptor.Entry{Key: k, Value: v}
	}
	return out
}

func d(kv ...string) []string { return kv }

func storeEntries(kv ...string) []store.Entry {
	out := make([]store.Entry, len(kv))
	for i, e := range entries(kv...) {
		out[i] = store.Entry{Key: e.Key, Value: e.Value}
	}
	return out
}

func fixedMinute(name string, rpu uint32) *descriptor.Limit {
	return &descriptor.Limit{Name: name, Unit: descriptor.Minute, UnitMultiplier: 1, RequestsPerUnit: rpu, Algorithm: algorithm.FixedWindow}
}

func assertResponse(t *testing.T, got, want *Response) {
	t.Helper()
	if got.Code != want.Code {
		t.Errorf("Code = %v, want %v", got.Code, want.Code)
	}
	if len(got.Statuses) != len(want.Statuses) {
		t.Fatalf("got %d statuses, want %d", len(got.Statuses), len(want.Statuses))
	}
	for i := range want.Statuses {
		g, w := got.Statuses[i], want.Statuses[i]
		g.Rule, w.Rule = nil, nil // TestCheckStatusRule checks it
		if !reflect.DeepEqual(g, w) {
			t.Errorf("Statuses[%d] = %s, want %s", i, fmtStatus(got.Statuses[i]), fmtStatus(want.Statuses[i]))
		}
	}
	if !reflect.DeepEqual(got.Headers, want.Headers) && (len(got.Headers) > 0 || len(want.Headers) > 0) {
		t.Errorf("Headers = %q, want %q", got.Headers, want.Headers)
	}
	if string(got.Body) != string(want.Body) {
		t.Errorf("Body = %s, want %s", got.Body, want.Body)
	}
}

func fmtStatus(s Status) string {
	lim := "<nil>"
	if s.Limit != nil {
		lim = fmt.Sprintf("%+v", *s.Limit)
	}
	return fmt.Sprintf("{%v limit=%s remaining=%d reset=%v retry=%v}", s.Code, lim, s.Remaining, s.ResetAfter, s.RetryAfter)
}

const policyYAML = `
domain: api
descriptors:
  - key: api_key
    value: "internal_*"
    action: allow
  - key: api_key
    value: "revoked_*"
    action: deny
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window, name: per_key}
  - key: free
    rate_limit: {unlimited: true}
  - key: tenant
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
`

func TestCheckPolicies(t *testing.T) {
	overBody := `{"code":429,"message":"rate limit exceeded","limit":2,"window":60,"retry_after_seconds":50,"reset_at":"2026-01-01T00:01:00Z"}`
	deniedBody := `{"code":429,"message":"request denied by policy","retry_after_seconds":1}`
	perKey := fixedMinute("per_key", 2)
	tests := []struct {
		name string
		reqs []*Request // sent in order; the last answer is checked
		want *Response
	}{
		{
			name: "unknown domain",
			reqs: []*Request{req("nope", d("api_key=a"), d("free=x"))},
			want: &Response{Code: OK, Statuses: []Status{{Code: OK}, {Code: OK}}},
		},
		{
			name: "no rule",
			reqs: []*Request{req("api", d("other=1"))},
			want: &Response{Code: OK, Statuses: []Status{{Code: OK}}},
		},
		{
			name: "node without limit",
			reqs: []*Request{req("api", d("tenant=t"))},
			want: &Response{Code: OK, Statuses: []Status{{Code: OK}}},
		},
		{
			name: "deeper than the rule",
			reqs: []*Request{req("api", d("api_key=a", "path=/"))},
			want: &Response{Code: OK, Statuses: []Status{{Code: OK}}},
		},
		{
			name: "unlimited",
			reqs: []*Request{req("api", d("free=x"))},
			want: &Response{Code: OK, Statuses: []Status{{Code: OK, Remaining: Unlimited}}},
		},
		{
			name: "allow list",
			reqs: []*Request{req("api", d("api_key=internal_1"))},
			want: &Response{
				Code:     OK,
				Statuses: []Status{{Code: OK, Remaining: Unlimited}},
				Headers:  []Header{{HeaderPolicy, PolicyAllowlist}},
			},
		},
		{
			name: "deny list",
			reqs: []*Request{req("api", d("api_key=revoked_1"))},
			want: &Response{
				Code:     OverLimit,
				Statuses: []Status{{Code: OverLimit}},
				Headers: []Header{
					{HeaderRetryAfter, "1"},
					{HeaderPolicy, PolicyDenylist},
					{HeaderContentType, "application/json"},
				},
				Body: []byte(deniedBody),
			},
		},
		{
			name: "first hit",
			reqs: []*Request{req("api", d("api_key=a"))},
			want: &Response{
				Code:     OK,
				Statuses: []Status{{Code: OK, Limit: perKey, Remaining: 1, ResetAfter: 50 * time.Second}},
				Headers:  []Header{{HeaderXLimit, "2"}, {HeaderXRemaining, "1"}, {HeaderXReset, t0Reset}},
			},
		},
		{
			name: "over the limit",
			reqs: []*Request{req("api", d("api_key=a")), req("api", d("api_key=a")), req("api", d("api_key=a"))},
			want: &Response{
				Code:     OverLimit,
				Statuses: []Status{{Code: OverLimit, Limit: perKey, ResetAfter: 50 * time.Second, RetryAfter: 50 * time.Second}},
				Headers: []Header{
					{HeaderXLimit, "2"}, {HeaderXRemaining, "0"}, {HeaderXReset, t0Reset},
					{HeaderRetryAfter, "50"},
					{HeaderContentType, "application/json"},
				},
				Body: []byte(overBody),
			},
		},
		{
			name: "other keys count apart",
			reqs: []*Request{req("api", d("api_key=a")), req("api", d("api_key=a")), req("api", d("api_key=b"))},
			want: &Response{
				Code:     OK,
				Statuses: []Status{{Code: OK, Limit: perKey, Remaining: 1, ResetAfter: 50 * time.Second}},
				Headers:  []Header{{HeaderXLimit, "2"}, {HeaderXRemaining, "1"}, {HeaderXReset, t0Reset}},
			},
		},
		{
			name: "statuses in request order",
			reqs: []*Request{req("api", d("free=x"), d("api_key=revoked_2"), d("other=1"), d("api_key=a"), d("api_key=internal_2"))},
			want: &Response{
				Code: OverLimit,
				Statuses: []Status{
					{Code: OK, Remaining: Unlimited},
					{Code: OverLimit},
					{Code: OK},
					// Checked, not charged: the deny list rejects the
					// request. An empty window has nothing to reset.
					{Code: OK, Limit: perKey, Remaining: 2},
					{Code: OK, Remaining: Unlimited},
				},
				Headers: []Header{
					{HeaderXLimit, "2"}, {HeaderXRemaining, "2"}, {HeaderXReset, t0Unix},
					{HeaderRetryAfter, "1"},
					{HeaderPolicy, PolicyAllowlist},
					{HeaderPolicy, PolicyDenylist},
					{HeaderContentType, "application/json"},
				},
				Body: []byte(deniedBody),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, policyYAML, nil)
			var resp *Response
			for _, r := range tt.reqs {
				resp = f.check(t, r)
			}
			assertResponse(t, resp, tt.want)
		})
	}
}

func TestCheckAllOrNothing(t *testing.T) {
	const yaml = `
domain: api
descriptors:
  - key: small
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: big
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
`
	f := newFixture(t, yaml, nil)
	f.check(t, req("api", d("small=s")))
	resp := f.check(t, req("api", d("big=b"), d("small=s")))
	if resp.Code != OverLimit || resp.Statuses[1].Code != OverLimit {
		t.Fatalf("second request: code %v, statuses %v; want OVER_LIMIT", resp.Code, resp.Statuses)
	}
	// The rejected request charged nothing to "big".
	probe := &Request{Domain: "api", Descriptors: []Descriptor{{Entries: entries("big=b"), HasHits: true}}}
	if got := f.check(t, probe).Statuses[0].Remaining; got != 5 {
		t.Errorf("big remaining = %d, want 5 (nothing charged)", got)
	}
	if n := len(f.store.batches); n != 3 {
		t.Errorf("store saw %d batches, want 3 (one per request)", n)
	}
}

func TestCheckHits(t *testing.T) {
	const yaml = `
domain: api
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
`
	tests := []struct {
		name          string
		reqHits       uint32
		desc          Descriptor
		wantCost      int64
		wantRemaining uint32
	}{
		{name: "default is one", wantCost: 1, wantRemaining: 9},
		{name: "request hits", reqHits: 3, wantCost: 3, wantRemaining: 7},
		{name: "descriptor hits win", reqHits: 3, desc: Descriptor{Hits: 4, HasHits: true}, wantCost: 4, wantRemaining: 6},
		{name: "descriptor zero checks only", reqHits: 3, desc: Descriptor{HasHits: true}, wantCost: 0, wantRemaining: 10},
		{name: "hits without HasHits ignored", reqHits: 2, desc: Descriptor{Hits: 4}, wantCost: 2, wantRemaining: 8},
		{name: "refund", desc: Descriptor{Hits: 2, HasHits: true, Refund: true}, wantCost: -2, wantRemaining: 10},
		{name: "huge descriptor hits", desc: Descriptor{Hits: 1 << 63, HasHits: true}, wantCost: 1<<63 - 1, wantRemaining: 10},
	}
	// No bound on hits, so that the cost arithmetic is tested to the end.
	noBound := func(o *Options) { o.MaxHits = ^uint64(0) }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, yaml, noBound)
			dd := tt.desc
			dd.Entries = entries("k=v")
			resp := f.check(t, &Request{Domain: "api", Hits: tt.reqHits, Descriptors: []Descriptor{dd}})
			hits := f.store.batches[0]
			if len(hits) != 1 || hits[0].Cost != tt.wantCost {
				t.Fatalf("hits = %+v, want one of cost %d", hits, tt.wantCost)
			}
			if got := resp.Statuses[0].Remaining; got != tt.wantRemaining {
				t.Errorf("remaining = %d, want %d", got, tt.wantRemaining)
			}
		})
	}
}

func TestCheckHitShape(t *testing.T) {
	const yaml = `
domain: api
shard_by: tenant
descriptors:
  - key: path
    value: "/api/*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: tenant
    descriptors:
      - key: path
        rate_limits:
          - {unit: second, requests_per_unit: 5, algorithm: fixed_window}
          - {unit: hour, requests_per_unit: 100, algorithm: fixed_window}
  - key: user
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: plan
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
`
	f := newFixture(t, yaml, nil)
	f.check(t, req("api", d("path=/api/x"), d("tenant=t1", "path=/y"), d("user=u"), d("plan=p")))
	want := []store.Hit{
		{Domain: "api", Entries: storeEntries("path=/api/*"), Shard: "/api/*", Limit: algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 10, Period: 60e6}, Cost: 1},
		{Domain: "api", Entries: storeEntries("tenant=t1", "path=/y"), Shard: "t1", Limit: algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 5, Period: 1e6}, Cost: 1},
		{Domain: "api", Entries: storeEntries("tenant=t1", "path=/y"), Shard: "t1", Limit: algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 100, Period: 3600e6}, Cost: 1},
		{Domain: "api", Entries: storeEntries("user=u"), Shard: "u", Limit: algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 1, Period: 60e6}, Cost: 1, Soft: true},
		{Domain: "api", Entries: storeEntries("plan=p"), Shard: "p", Limit: algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 1, Period: 60e6}, Cost: 1, Soft: true},
	}
	if len(f.store.batches) != 1 {
		t.Fatalf("store saw %d batches, want 1", len(f.store.batches))
	}
	if got := f.store.batches[0]; !reflect.DeepEqual(got, want) {
		t.Errorf("hits:\n got %+v\nwant %+v", got, want)
	}
}

func TestCheckSeveralLimits(t *testing.T) {
	const yaml = `
domain: api
descriptors:
  - key: k
    rate_limits:
      - {unit: minute, requests_per_unit: 5, algorithm: fixed_window, name: minute}
      - {unit: hour, requests_per_unit: 2, algorithm: fixed_window, name: hour}
`
	hour := &descriptor.Limit{Name: "hour", Unit: descriptor.Hour, UnitMultiplier: 1, RequestsPerUnit: 2, Algorithm: algorithm.FixedWindow}
	f := newFixture(t, yaml, nil)
	resp := f.check(t, req("api", d("k=v")))
	// The hour limit has fewer left, so it is reported.
	wantReset := time.Hour - 10*time.Second
	assertResponse(t, resp, &Response{
		Code:     OK,
		Statuses: []Status{{Code: OK, Limit: hour, Remaining: 1, ResetAfter: wantReset}},
		Headers:  []Header{{HeaderXLimit, "2"}, {HeaderXRemaining, "1"}, {HeaderXReset, "1767229200"}},
	})
	f.check(t, req("api", d("k=v")))
	resp = f.check(t, req("api", d("k=v")))
	if resp.Code != OverLimit || resp.Statuses[0].Limit.Name != "hour" || resp.Statuses[0].RetryAfter != wantReset {
		t.Errorf("third request: %v %s, want OVER_LIMIT on the hour limit", resp.Code, fmtStatus(resp.Statuses[0]))
	}
}

func TestCheckOverride(t *testing.T) {
	const yaml = `
domain: api
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_window_counter, name: ruled}
  - key: free
    rate_limit: {unlimited: true}
  - key: bad
    action: deny
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: fixed_window}
`
	override := func(entry string, o Override) *Request {
		return &Request{Domain: "api", Descriptors: []Descriptor{{Entries: entries(entry), Override: &o}}}
	}
	tests := []struct {
		name      string
		req       *Request
		repeat    int // extra identical requests sent first
		wantCode  Code
		wantLimit *descriptor.Limit
		wantKind  algorithm.Kind
	}{
		{
			name:      "replaces the rule's limit, keeps its algorithm",
			req:       override("k=v", Override{RequestsPerUnit: 2, Unit: descriptor.Minute, UnitMultiplier: 5}),
			wantCode:  OK,
			wantLimit: &descriptor.Limit{Unit: descriptor.Minute, UnitMultiplier: 5, RequestsPerUnit: 2, Algorithm: algorithm.SlidingWindowCounter},
			wantKind:  algorithm.SlidingWindowCounter,
		},
		{
			name:      "no rule uses the default algorithm",
			req:       override("none=v", Override{RequestsPerUnit: 1, Unit: descriptor.Second}),
			repeat:    1,
			wantCode:  OverLimit,
			wantLimit: &descriptor.Limit{Unit: descriptor.Second, UnitMultiplier: 1, RequestsPerUnit: 1, Algorithm: algorithm.FixedWindow},
			wantKind:  algorithm.FixedWindow,
		},
		{
			name:      "counts an unlimited rule",
			req:       override("free=v", Override{RequestsPerUnit: 7, Unit: descriptor.Hour}),
			wantCode:  OK,
			wantLimit: &descriptor.Limit{Unit: descriptor.Hour, UnitMultiplier: 1, RequestsPerUnit: 7, Algorithm: algorithm.FixedWindow},
			wantKind:  algorithm.FixedWindow,
		},
		{
			name:      "ignores the rule's shadow mode",
			req:       override("shadowed=v", Override{RequestsPerUnit: 1, Unit: descriptor.Minute}),
			repeat:    1,
			wantCode:  OverLimit,
			wantLimit: &descriptor.Limit{Unit: descriptor.Minute, UnitMultiplier: 1, RequestsPerUnit: 1, Algorithm: algorithm.FixedWindow},
			wantKind:  algorithm.FixedWindow,
		},
		{
			name:     "deny list still wins",
			req:      override("bad=v", Override{RequestsPerUnit: 7, Unit: descriptor.Hour}),
			wantCode: OverLimit,
		},
		{
			name:     "unknown domain ignores it",
			req:      &Request{Domain: "other", Descriptors: []Descriptor{{Entries: entries("k=v"), Override: &Override{RequestsPerUnit: 0, Unit: descriptor.Minute}}}},
			wantCode: OK,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, yaml, func(o *Options) { o.DefaultAlgorithm = algorithm.FixedWindow })
			for range tt.repeat {
				f.check(t, tt.req)
			}
			resp := f.check(t, tt.req)
			st := resp.Statuses[0]
			if resp.Code != tt.wantCode || st.Code != tt.wantCode {
				t.Errorf("code = %v/%v, want %v", resp.Code, st.Code, tt.wantCode)
			}
			if !reflect.DeepEqual(st.Limit, tt.wantLimit) {
				t.Errorf("limit = %+v, want %+v", st.Limit, tt.wantLimit)
			}
			if tt.wantKind != 0 {
				last := f.store.batches[len(f.store.batches)-1]
				if len(last) != 1 || last[0].Limit.Kind != tt.wantKind || last[0].Limit.Period != tt.wantLimit.Period().Microseconds() {
					t.Errorf("hits = %+v, want one %v hit over %v", last, tt.wantKind, tt.wantLimit.Period())
				}
			} else if len(f.store.batches) != 0 {
				t.Errorf("store saw %d batches, want none", len(f.store.batches))
			}
		})
	}
}

func TestCheckReplaces(t *testing.T) {
	const yaml = `
domain: api
descriptors:
  - key: base
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window, name: base}
  - key: premium
    rate_limit:
      unit: minute
      requests_per_unit: 100
      algorithm: fixed_window
      name: premium
      replaces: [{name: base}]
  - key: vip
    rate_limit:
      unlimited: true
      replaces: [{name: base}]
`
	premium := fixedMinute("premium", 100)
	base := fixedMinute("base", 1)
	tests := []struct {
		name string
		req  *Request
		want []Status
		hits int
	}{
		{
			name: "alone, base counts",
			req:  req("api", d("base=b")),
			want: []Status{{Code: OK, Limit: base, ResetAfter: 50 * time.Second}},
			hits: 1,
		},
		{
			name: "replaced by a counted rule",
			req:  req("api", d("base=b"), d("premium=p")),
			want: []Status{{Code: OK}, {Code: OK, Limit: premium, Remaining: 99, ResetAfter: 50 * time.Second}},
			hits: 1,
		},
		{
			name: "replaced by an unlimited rule",
			req:  req("api", d("vip=v"), d("base=b")),
			want: []Status{{Code: OK, Remaining: Unlimited}, {Code: OK}},
			hits: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, yaml, nil)
			resp := f.check(t, tt.req)
			assertResponse(t, &Response{Code: resp.Code, Statuses: resp.Statuses}, &Response{Code: OK, Statuses: tt.want})
			got := 0
			for _, b := range f.store.batches {
				got += len(b)
			}
			if got != tt.hits {
				t.Errorf("store saw %d hits, want %d", got, tt.hits)
			}
		})
	}
}

func TestCheckShadowAndQuota(t *testing.T) {
	const yaml = `
domain: api
descriptors:
  - key: hard
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window, name: hard}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window, name: shadow}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window, name: quota}
`
	hard, shadow, quota := fixedMinute("hard", 1), fixedMinute("shadow", 1), fixedMinute("quota", 1)
	okOf := func(l *descriptor.Limit) Status { return Status{Code: OK, Limit: l, ResetAfter: 50 * time.Second} }
	overOf := func(l *descriptor.Limit) Status {
		return Status{Code: OverLimit, Limit: l, ResetAfter: 50 * time.Second, RetryAfter: 50 * time.Second}
	}
	tests := []struct {
		name     string
		global   bool
		exhaust  *Request // sent first
		req      *Request
		wantCode Code
		want     []Status
	}{
		{
			name:     "shadow over answers OK",
			exhaust:  req("api", d("shadow=s")),
			req:      req("api", d("shadow=s")),
			wantCode: OK,
			want:     []Status{okOf(shadow)},
		},
		{
			name:     "shadow over does not block the batch",
			exhaust:  req("api", d("shadow=s")),
			req:      req("api", d("shadow=s"), d("hard=h")),
			wantCode: OK,
			want:     []Status{okOf(shadow), okOf(hard)},
		},
		{
			name:     "global shadow mode answers OK",
			global:   true,
			exhaust:  req("api", d("hard=h")),
			req:      req("api", d("hard=h")),
			wantCode: OK,
			want:     []Status{okOf(hard)},
		},
		{
			name:     "one quota descriptor over of two",
			exhaust:  req("api", d("quota=a")),
			req:      req("api", d("quota=a"), d("quota=b")),
			wantCode: OK,
			want:     []Status{overOf(quota), okOf(quota)},
		},
		{
			name:     "every quota descriptor over",
			exhaust:  req("api", d("quota=a"), d("quota=b")),
			req:      req("api", d("quota=a"), d("quota=b")),
			wantCode: OverLimit,
			want:     []Status{overOf(quota), overOf(quota)},
		},
		{
			name:     "a hard limit over with quota left",
			exhaust:  req("api", d("hard=h")),
			req:      req("api", d("hard=h"), d("quota=a")),
			wantCode: OverLimit,
			// The rejected batch charged nothing to quota=a.
			want: []Status{overOf(hard), {Code: OK, Limit: quota, Remaining: 1}},
		},
		{
			name:     "quota over with hard limits within",
			exhaust:  req("api", d("quota=a")),
			req:      req("api", d("hard=h"), d("quota=a")),
			wantCode: OverLimit,
			want:     []Status{okOf(hard), overOf(quota)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, yaml, func(o *Options) { o.ShadowMode = tt.global; o.HeaderStyle = HeadersNone })
			f.check(t, tt.exhaust)
			resp := f.check(t, tt.req)
			assertResponse(t, &Response{Code: resp.Code, Statuses: resp.Statuses}, &Response{Code: tt.wantCode, Statuses: tt.want})
		})
	}
}

// logRecorder keeps the messages and attributes of every record.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

func TestCheckStoreFailure(t *testing.T) {
	logs := &logRecorder{}
	f := newFixture(t, policyYAML, func(o *Options) {
		o.Store = storetest.Failing{Err: fmt.Errorf("redis: %w", store.ErrUnavailable)}
		o.Logger = slog.New(logs)
	})
	resp := f.check(t, req("api", d("api_key=a"), d("free=x"), d("api_key=revoked_1")))
	assertResponse(t, resp, &Response{
		Code:     OverLimit,
		Statuses: []Status{{Code: OK}, {Code: OK, Remaining: Unlimited}, {Code: OverLimit}},
		Headers: []Header{
			{HeaderRetryAfter, "1"},
			{HeaderPolicy, PolicyDenylist},
			{HeaderPolicy, PolicyDegraded},
			{HeaderContentType, "application/json"},
		},
		Body: []byte(`{"code":429,"message":"request denied by policy","retry_after_seconds":1}`),
	})
	resp = f.check(t, req("api", d("api_key=a")))
	assertResponse(t, resp, &Response{
		Code:     OK,
		Statuses: []Status{{Code: OK}},
		Headers:  []Header{{HeaderPolicy, PolicyDegraded}},
	})
	f.check(t, req("api", d("api_key=a")))
	if n := len(logs.records); n != 1 {
		t.Fatalf("%d log lines after 3 failures in one instant, want 1", n)
	}
	f.clock.Advance(storeErrorLogInterval)
	f.check(t, req("api", d("api_key=a")))
	if n := len(logs.records); n != 2 {
		t.Fatalf("%d log lines after the interval, want 2", n)
	}
	var suppressed int64 = -1
	logs.records[1].Attrs(func(a slog.Attr) bool {
		if a.Key == "suppressed" {
			suppressed = a.Value.Int64()
		}
		return true
	})
	if suppressed != 2 {
		t.Errorf("second log line reports %d suppressed errors, want 2", suppressed)
	}
}

func TestCheckContextEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := newFixture(t, policyYAML, func(o *Options) { o.Store = storetest.Failing{Err: context.Canceled} })
	_, err := f.lim.Check(ctx, req("api", d("api_key=a")))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Check error = %v, want context.Canceled", err)
	}
}

func TestNewRequiresStoreAndTree(t *testing.T) {
	tree := func() *descriptor.Tree { return nil }
	if _, err := New(Options{Tree: tree}); err == nil {
		t.Error("New without a store succeeded")
	}
	if _, err := New(Options{Store: storetest.Failing{}}); err == nil {
		t.Error("New without a tree succeeded")
	}
	l, err := New(Options{Store: storetest.Failing{}, Tree: tree})
	if err != nil {
		t.Fatalf("New with zero options: %v", err)
	}
	if resp, err := l.Check(context.Background(), req("any", d("k=v"))); !errors.Is(err, ErrNoRules) {
		t.Errorf("Check with a nil tree = %+v, %v; want ErrNoRules", resp, err)
	}
}

func TestCheckRejectedRequestChargesNothing(t *testing.T) {
	const yaml = `
domain: api
descriptors:
  - key: hard
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: bad
    action: deny
`
	probe := &Request{Domain: "api", Descriptors: []Descriptor{{Entries: entries("hard=h"), HasHits: true}}}
	tests := []struct {
		name     string
		global   bool
		exhaust  *Request
		req      *Request
		wantCode Code
		wantLeft uint32 // remaining of hard=h afterwards
	}{
		{
			name:     "deny list",
			req:      req("api", d("hard=h"), d("bad=b")),
			wantCode: OverLimit,
			wantLeft: 5,
		},
		{
			name:     "deny list in global shadow mode",
			global:   true,
			req:      req("api", d("hard=h"), d("bad=b")),
			wantCode: OK,
			wantLeft: 4,
		},
		{
			name:     "every quota descriptor over",
			exhaust:  req("api", d("quota=q")),
			req:      req("api", d("hard=h"), d("quota=q")),
			wantCode: OverLimit,
			wantLeft: 5,
		},
		{
			name:     "quota left",
			req:      req("api", d("hard=h"), d("quota=q")),
			wantCode: OK,
			wantLeft: 4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, yaml, func(o *Options) { o.ShadowMode = tt.global })
			if tt.exhaust != nil {
				f.check(t, tt.exhaust)
			}
			resp := f.check(t, tt.req)
			if resp.Code != tt.wantCode {
				t.Errorf("Code = %v, want %v", resp.Code, tt.wantCode)
			}
			if tt.global {
				assertHeaders(t, resp.Headers, []Header{{HeaderXLimit, "5"}, {HeaderXRemaining, "4"}, {HeaderXReset, t0Reset}})
			}
			if got := f.check(t, probe).Statuses[0].Remaining; got != tt.wantLeft {
				t.Errorf("hard=h remaining = %d, want %d", got, tt.wantLeft)
			}
		})
	}
}

func TestCheckConcurrent(t *testing.T) {
	const yaml = `
domain: api
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: fixed_window}
`
	// Two equal trees swapped under the requests exercise the per-snapshot
	// label cache.
	trees := [2]*descriptor.Tree{loadTree(t, yaml), loadTree(t, yaml)}
	var swaps atomic.Int64
	f := newFixture(t, yaml, func(o *Options) {
		o.Tree = func() *descriptor.Tree { return trees[swaps.Add(1)%2] }
	})
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				resp, err := f.lim.Check(context.Background(), req("api", d("k=v")))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.Code == OK {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := ok.Load(); got != 100 {
		t.Errorf("%d of 200 concurrent requests admitted, want exactly 100", got)
	}
}

func TestCheckIntoReuse(t *testing.T) {
	f := newFixture(t, policyYAML, nil)
	var resp Response
	ctx := context.Background()
	// An over-limit answer with a body and two statuses, then a smaller OK
	// one into the same Response.
	if err := f.lim.CheckInto(ctx, req("api", d("api_key=revoked_1"), d("free=x")), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Code != OverLimit || len(resp.Statuses) != 2 || resp.Body == nil {
		t.Fatalf("first answer = %+v, want OVER_LIMIT with two statuses and a body", resp)
	}
	first := resp.Headers[0]
	if err := f.lim.CheckInto(ctx, req("api", d("api_key=a")), &resp); err != nil {
		t.Fatal(err)
	}
	assertResponse(t, &resp, &Response{
		Code:     OK,
		Statuses: []Status{{Code: OK, Limit: fixedMinute("per_key", 2), Remaining: 1, ResetAfter: 50 * time.Second}},
		Headers:  []Header{{HeaderXLimit, "2"}, {HeaderXRemaining, "1"}, {HeaderXReset, t0Reset}},
	})
	if first != (Header{HeaderRetryAfter, "1"}) {
		t.Errorf("a header copied from the first answer changed to %q", first)
	}
	if err := f.lim.CheckInto(ctx, &Request{Domain: "api"}, &resp); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("CheckInto of an empty request = %v, want ErrInvalidRequest", err)
	}
}
