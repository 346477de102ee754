package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
)

const rules = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
  - key: user
    value: vip
    action: allow
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window, penalty: {cooldown: 10s}}
`

func newHandler(t *testing.T, ready func() error) http.Handler {
	t.Helper()
	tree, err := descriptor.LoadFS(fstest.MapFS{"api.yaml": {Data: []byte(rules)}}, descriptor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC) }
	lim, err := limiter.New(limiter.Options{
		Store:          memory.New(memory.Options{Now: now}),
		Tree:           func() *descriptor.Tree { return tree },
		HeaderStyle:    limiter.HeadersXRateLimit,
		Now:            now,
		MaxDescriptors: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return New(Options{Limiter: lim, Ready: ready})
}

func post(h http.Handler, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body)))
	return rec
}

func TestCheck(t *testing.T) {
	h := newHandler(t, nil)
	user := `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}`
	wantRemaining := []string{`"remaining":1`, `"remaining":0`}
	for i, want := range wantRemaining {
		rec := post(h, user)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) || !strings.Contains(rec.Body.String(), `"allowed":true`) {
			t.Fatalf("call %d: %d %s, want 200 allowed with %s", i+1, rec.Code, rec.Body, want)
		}
		if got := rec.Header().Get("X-RateLimit-Remaining"); got != strings.TrimPrefix(want, `"remaining":`) {
			t.Errorf("call %d: X-RateLimit-Remaining %q", i+1, got)
		}
	}
	rec := post(h, user)
	var out CheckResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	// The fixed window ends 30 s after the injected clock.
	if rec.Code != http.StatusTooManyRequests || out.Allowed || out.Code != "OVER_LIMIT" || out.RetryAfterSeconds != 30 ||
		rec.Header().Get("Retry-After") != "30" || out.Statuses[0].Limit.Algorithm != "fixed_window" {
		t.Fatalf("third call: %d %s, headers %v; want 429 with Retry-After 30", rec.Code, rec.Body, rec.Header())
	}

	rec = post(h, `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"vip"}]}]}`)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"remaining":4294967295`) ||
		rec.Header().Get("X-RateLimit-Policy") != "allowlist" {
		t.Fatalf("allow-listed user: %d %s %v", rec.Code, rec.Body, rec.Header())
	}
}

func TestCheckRejectsBadInput(t *testing.T) {
	h := newHandler(t, nil)
	tests := []struct{ body, want string }{
		{`{`, "decoding request body"},
		{`{"domain":"api","descriptors":[],"extra":1}`, `unknown field \"extra\"`},
		{`{"descriptors":[{"entries":[{"key":"user","value":"u"}]}]}`, "empty domain"},
		{`{"domain":"api"}`, "no descriptors"},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"","value":"u"}]}]}`, "descriptors[0].entries[0]: empty key"},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u"}],"charge":"admitted"}]}`, `descriptors[0].charge: must be \"always\", got \"admitted\"`},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u"}],"charge":"Always"}]}`, `descriptors[0].charge: must be \"always\", got \"Always\"`},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u"}],"charge":""}]}`, `descriptors[0].charge: must be \"always\", got \"\"`},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u"}],"charge":true}]}`, "decoding request body"},
		{`{"domain":"api","descriptors":[{"entries":[],"charge":"always"}]}`, "descriptors[0]: no entries but tollgate.charge"},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"tollgate.charge","value":"x"},{"key":"user","value":"u"}]}]}`, `descriptors[0]: tollgate.charge must be \"always\", got \"x\"`},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"a","value":"` + strings.Repeat("x", 2<<20) + `"}]}]}`, "request body too large"},
	}
	for _, tt := range tests {
		rec := post(h, tt.body)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), tt.want) {
			t.Errorf("body %.60s: %d %s, want 400 containing %q", tt.body, rec.Code, rec.Body, tt.want)
		}
	}
}

// TestCheckBeyondBounds shows that a request beyond the engine's bounds
// (tested in package limiter) is answered 400 with the reason.
func TestCheckBeyondBounds(t *testing.T) {
	rec := post(newHandler(t, nil), `{"domain":"api","descriptors":[{"entries":[{"key":"a","value":"b"}]},{"entries":[{"key":"a","value":"b"}]}]}`)
	const want = `{"error":"invalid rate-limit request: 2 descriptors exceed the limit of 1","status":"400"}` + "\n"
	if rec.Code != http.StatusBadRequest || rec.Body.String() != want {
		t.Errorf("got %d %s, want 400 %s", rec.Code, rec.Body, want)
	}
}

func TestProbes(t *testing.T) {
	var notReady error
	h := newHandler(t, func() error { return notReady })
	get := func(path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	for _, path := range []string{"/healthz", "/readyz", "/healthcheck"} {
		if code := get(path); code != http.StatusOK {
			t.Errorf("GET %s = %d, want 200", path, code)
		}
	}
	notReady = errors.New("no configuration")
	if code := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz when not ready = %d, want 503", code)
	}
	if code := get("/healthz"); code != http.StatusOK {
		t.Errorf("GET /healthz when not ready = %d, want 200 (liveness)", code)
	}
}

// recordingChecker passes requests on to a real limiter and keeps the
// last one.
type recordingChecker struct {
	Checker
	last *limiter.Request
}

func (c *recordingChecker) Check(ctx context.Context, req *limiter.Request) (*limiter.Response, error) {
	c.last = req
	return c.Checker.Check(ctx, req)
}

// TestCheckChargeAlways checks that "charge": "always" reaches the engine
// as the tollgate.charge=always entry, and so counts in the counter of
// the descriptor without it.
func TestCheckChargeAlways(t *testing.T) {
	tree, err := descriptor.LoadFS(fstest.MapFS{"api.yaml": {Data: []byte(rules)}}, descriptor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC) }
	lim, err := limiter.New(limiter.Options{Store: memory.New(memory.Options{Now: now}), Tree: func() *descriptor.Tree { return tree }, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	rc := &recordingChecker{Checker: lim}
	h := New(Options{Limiter: rc})

	rec := post(h, `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u1"}],"hits":1,"charge":"always"}]}`)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"remaining":1`) {
		t.Fatalf("charged call: %d %s, want 200 with 1 remaining", rec.Code, rec.Body)
	}
	want := []descriptor.Entry{{Key: "user", Value: "u1"}, {Key: limiter.ChargeKey, Value: limiter.ChargeAlwaysValue}}
	if got := rc.last.Descriptors[0].Entries; !reflect.DeepEqual(got, want) {
		t.Errorf("entries = %v, want %v", got, want)
	}
	rec = post(h, `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}`)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"remaining":0`) {
		t.Fatalf("plain call: %d %s, want 200 with 0 remaining (one counter)", rec.Code, rec.Body)
	}
	if got := rc.last.Descriptors[0].Entries; len(got) != 1 {
		t.Errorf("plain call entries = %v, want the request's one", got)
	}
}

// TestCheckPenalizedAndNever checks that a status says when a penalty
// rejected it, and when no wait would help because the cost exceeds the
// capacity.
func TestCheckPenalizedAndNever(t *testing.T) {
	h := newHandler(t, nil)
	client := `{"domain":"api","descriptors":[{"entries":[{"key":"client","value":"c1"}]}]}`
	for i, want := range []string{`"code":"OK"`, `"retry_after_seconds":30}`, `"retry_after_seconds":10,"penalized":true}`} {
		if rec := post(h, client); !strings.Contains(rec.Body.String(), want) {
			t.Fatalf("call %d: %s, want %s", i+1, rec.Body, want)
		}
	}
	rec := post(h, `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u1"}],"hits":3}]}`)
	if rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), `"never":true`) || strings.Contains(rec.Body.String(), "retry_after") {
		t.Fatalf("a cost of 3 against a limit of 2: %d %s, want 429 never, without retry_after", rec.Code, rec.Body)
	}
}
