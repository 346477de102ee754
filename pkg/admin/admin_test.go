package admin_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/metrictest"
	"github.com/tollgatehq/tollgate/pkg/admin"
	"github.com/tollgatehq/tollgate/pkg/audit"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/httpapi"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/override/statefile"
	"github.com/tollgatehq/tollgate/pkg/record"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/top"
)

const rules = `domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
    descriptors:
      - key: endpoint
        rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: tier
    value: vip
    action: allow
`

// The tokens of the tests: alice's from the file, the environment's.
const (
	aliceToken = "alice-token-3f9c1d"
	envToken   = "env-token-81ab44"
)

// now is the clock of every test: 30 s into a minute, so a minute's fixed
// window resets in 30 s.
var now = time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)

// server is an HTTP API with the admin API on, built from real parts: the
// limiter on the memory store, the override registry on its state file.
type server struct {
	h     http.Handler
	audit *audit.Log
	// logs has everything the handler, the tokens and the registry logged;
	// auditLines what the audit wrote.
	logs, auditLines *logtest.Buffer
	// at is the time every part reads, now unless a test moves it.
	at time.Time
	// metric reads the admin API's metrics.
	metric func(name string) int64
}

func newServer(t *testing.T) *server {
	t.Helper()
	return newServerShowing(t, descriptor.ValuesPlain)
}

// newServerShowing is newServer with the registry and the admin API
// showing descriptor values as values says.
func newServerShowing(t *testing.T, values descriptor.ValueView) *server {
	t.Helper()
	tree, err := descriptor.LoadFS(fstest.MapFS{"api.yaml": {Data: []byte(rules)}}, descriptor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := &server{logs: &logtest.Buffer{}, auditLines: &logtest.Buffer{}, at: now}
	clock := func() time.Time { return srv.at }
	logger := slog.New(slog.NewTextHandler(srv.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	backend, err := statefile.Open(t.TempDir(), statefile.Options{Now: clock, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	registry, err := override.NewRegistry(override.Options{
		Backend: backend, Tree: func() *descriptor.Tree { return tree }, Now: clock, Logger: logger, Values: values,
	})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := top.New(top.Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	recorder, err := record.New(record.Options{Output: io.Discard, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(recorder.Close)
	lim, err := limiter.New(limiter.Options{
		Store:       memory.New(memory.Options{Now: clock}),
		Tree:        func() *descriptor.Tree { return tree },
		Overrides:   registry.Current,
		HeaderStyle: limiter.HeadersXRateLimit,
		Now:         clock,
		Logger:      logger,
		Observer:    topObserver{rec},
	})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte("# admins\nalice "+aliceToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := admin.NewTokens(admin.TokensOptions{File: tokenFile, Env: envToken, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv.audit = audit.New(audit.Options{Logger: slog.New(slog.NewJSONHandler(srv.auditLines, nil)), Now: clock})
	meters, metric := metrictest.New(t)
	srv.metric = metric
	adm, err := admin.New(admin.Options{
		Tokens: tokens, Overrides: registry, Limiter: lim, Resetter: lim, Audit: srv.audit, Now: clock, Logger: logger,
		MeterProvider: meters, Values: values, Top: rec, Recorder: recorder,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The public listener's check beside the admin API, as a client
	// sees them.
	both := http.NewServeMux()
	both.Handle("POST /v1/check", httpapi.New(httpapi.Options{Limiter: lim, Logger: logger}))
	both.Handle("/", adm)
	srv.h = both
	return srv
}

// call makes a request with token (none if "") and returns the status and
// the body.
func (s *server) call(t *testing.T, token, method, target, body string) (int, string) {
	t.Helper()
	rec := s.do(token, method, target, body)
	return rec.Code, rec.Body.String()
}

func (s *server) do(token, method, target, body string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, req)
	return rec
}

// errorJSON returns the API's error answer for msg and status.
func errorJSON(status int, msg string) string {
	b, _ := json.Marshal(map[string]string{"error": msg, "status": strconv.Itoa(status)})
	return string(b) + "\n"
}

func itoa(n int) string { return strconv.Itoa(n) }

// routes are a request on every admin route.
var routes = []struct{ method, target, body string }{
	{http.MethodPost, "/v1/overrides", `{}`},
	{http.MethodGet, "/v1/overrides", ""},
	{http.MethodGet, "/v1/overrides/abc", ""},
	{http.MethodDelete, "/v1/overrides/abc", ""},
	{http.MethodPost, "/v1/remaining", `{}`},
	{http.MethodPost, "/v1/reset", `{}`},
	{http.MethodGet, "/v1/audit", ""},
}

func TestDisabledAdminAnswers404(t *testing.T) {
	h := httpapi.New(httpapi.Options{})
	for _, r := range routes {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(r.method, r.target, strings.NewReader(r.body))
		req.Header.Set("Authorization", "Bearer "+aliceToken)
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotFound {
			t.Errorf("%s %s without an admin API: %d %s, want 404", r.method, r.target, rec.Code, rec.Body)
		}
	}
}

// TestThrottle refuses calls from one address until they pass the
// throttle's burst: then every call from it, a valid token's too, is
// answered 429 with Retry-After until a refusal refills, while another
// address is served; each refusal is counted by reason.
func TestThrottle(t *testing.T) {
	s := newServer(t)
	call := func(addr, token string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "/v1/overrides", nil)
		req.RemoteAddr = addr + ":40000"
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		s.h.ServeHTTP(rec, req)
		return rec
	}
	const guesser, operator = "198.51.100.7", "198.51.100.8"
	for i := range 10 {
		if rec := call(guesser, fmt.Sprintf("guess-%d", i)); rec.Code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401", i, rec.Code)
		}
	}
	for _, token := range []string{"guess-10", aliceToken} {
		rec := call(guesser, token)
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "6" {
			t.Errorf("after 10 refusals, a call with %q: %d, Retry-After %q; want 429, 6", token, rec.Code, rec.Header().Get("Retry-After"))
		}
	}
	if rec := call(operator, aliceToken); rec.Code != http.StatusOK {
		t.Errorf("another address: %d, want 200", rec.Code)
	}
	s.at = s.at.Add(6 * time.Second)
	if rec := call(guesser, aliceToken); rec.Code != http.StatusOK {
		t.Errorf("a valid token once a refusal refilled: %d, want 200", rec.Code)
	}
	if got := s.metric("tollgate.admin.refused"); got != 12 {
		t.Errorf("tollgate.admin.refused = %d, want 12 (10 unknown tokens, 2 throttled)", got)
	}
}

func TestAuthentication(t *testing.T) {
	s := newServer(t)
	refused := errorJSON(http.StatusUnauthorized, "a valid admin bearer token is required")
	for i, tc := range []struct {
		name          string
		authorization string // "-" for no header
		want          int
	}{
		{"no header", "-", http.StatusUnauthorized},
		{"empty", "", http.StatusUnauthorized},
		{"basic", "Basic " + aliceToken, http.StatusUnauthorized},
		{"bearer without token", "Bearer ", http.StatusUnauthorized},
		{"wrong token", "Bearer not-" + aliceToken, http.StatusUnauthorized},
		{"token prefix", "Bearer " + aliceToken[:len(aliceToken)-1], http.StatusUnauthorized},
		{"token without scheme", aliceToken, http.StatusUnauthorized},
		{"file token", "Bearer " + aliceToken, http.StatusOK},
		{"scheme in lower case", "bearer " + aliceToken, http.StatusOK},
		{"environment token", "Bearer " + envToken, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range routes {
				req := httptest.NewRequest(r.method, r.target, strings.NewReader(r.body))
				// Each case from an address of its own, whose refusals
				// the throttle has not spent (TestThrottle).
				req.RemoteAddr = fmt.Sprintf("192.0.2.%d:1234", i+1)
				if tc.authorization != "-" {
					req.Header.Set("Authorization", tc.authorization)
				}
				rec := httptest.NewRecorder()
				s.h.ServeHTTP(rec, req)
				if tc.want == http.StatusUnauthorized {
					if rec.Code != http.StatusUnauthorized || rec.Body.String() != refused ||
						rec.Header().Get("WWW-Authenticate") != `Bearer realm="tollgate"` {
						t.Errorf("%s %s: %d %q, WWW-Authenticate %q; want 401 %q with a Bearer challenge",
							r.method, r.target, rec.Code, rec.Body, rec.Header().Get("WWW-Authenticate"), refused)
					}
					continue
				}
				if rec.Code == http.StatusUnauthorized {
					t.Errorf("%s %s: refused a valid token: %s", r.method, r.target, rec.Body)
				}
			}
		})
	}
}

// decode decodes body into a T, failing the test if it cannot.
func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("answer %q: %v", body, err)
	}
	return v
}

func TestCreateOverride(t *testing.T) {
	const entries = `"domain":"api","entries":[{"key":"api_key","value":"k1"}]`
	for _, tc := range []struct {
		name string
		body string
		// want is the stored override (without ID), or wantErr the 400
		// error.
		want    override.Override
		wantErr string
	}{
		{
			name: "absolute, expires in",
			body: `{` + entries + `,"limit":{"requests_per_unit":5000,"unit":"MINUTE"},"expires_in":"48h","reason":"launch"}`,
			want: override.Override{Domain: "api", Entries: []descriptor.Entry{{Key: "api_key", Value: "k1"}},
				Limit: &override.Limit{RequestsPerUnit: 5000, Unit: "minute"}, ExpiresAt: now.Add(48 * time.Hour),
				Reason: "launch", CreatedBy: "alice", CreatedAt: now},
		},
		{
			name: "multiplier, expires at",
			body: `{` + entries + `,"multiplier":2.5,"expires_at":"2026-01-02T00:00:00+01:00"}`,
			want: override.Override{Domain: "api", Entries: []descriptor.Entry{{Key: "api_key", Value: "k1"}},
				Multiplier: 2.5, ExpiresAt: time.Date(2026, 1, 1, 23, 0, 0, 0, time.UTC), CreatedBy: "alice", CreatedAt: now},
		},
		{name: "not JSON", body: `{"domain":`, wantErr: "decoding request body: unexpected EOF"},
		{name: "unknown field", body: `{` + entries + `,"multiplier":2,"expires_in":"1h","ttl":"1h"}`,
			wantErr: `decoding request body: json: unknown field "ttl"`},
		{name: "two values", body: `{` + entries + `,"multiplier":2,"expires_in":"1h"} {}`,
			wantErr: "decoding request body: more than one JSON value"},
		{name: "no expiry", body: `{` + entries + `,"multiplier":2}`, wantErr: "expires_in or expires_at is required"},
		{name: "both expiries", body: `{` + entries + `,"multiplier":2,"expires_in":"1h","expires_at":"2026-01-02T00:00:00Z"}`,
			wantErr: "expires_in and expires_at: give one, not both"},
		{name: "bad duration", body: `{` + entries + `,"multiplier":2,"expires_in":"2 days"}`,
			wantErr: `expires_in: time: unknown unit " days" in duration "2 days"`},
		{name: "negative duration", body: `{` + entries + `,"multiplier":2,"expires_in":"-1h"}`,
			wantErr: "expires_in: must be positive, got -1h0m0s"},
		{name: "bad time", body: `{` + entries + `,"multiplier":2,"expires_at":"tomorrow"}`,
			wantErr: `decoding request body: parsing time "tomorrow" as "2006-01-02T15:04:05Z07:00": cannot parse "tomorrow" as "2006"`},
		{name: "zero multiplier", body: `{` + entries + `,"multiplier":0,"expires_in":"1h"}`,
			wantErr: "multiplier: must be greater than 0, got 0"},
		{name: "zero multiplier beside a limit", body: `{` + entries + `,"limit":{"requests_per_unit":5,"unit":"minute"},"multiplier":0,"expires_in":"1h"}`,
			wantErr: "multiplier: must be greater than 0, got 0"},
		// The registry's refusals.
		{name: "unknown domain", body: `{"domain":"web","entries":[{"key":"api_key","value":"k1"}],"multiplier":2,"expires_in":"1h"}`,
			wantErr: `invalid override: unknown domain "web"`},
		{name: "no rule", body: `{"domain":"api","entries":[{"key":"tier","value":"vip"}],"multiplier":2,"expires_in":"1h"}`,
			wantErr: `invalid override: entries tier=vip resolve to no rule with a limit in domain "api"`},
		{name: "limit and multiplier", body: `{` + entries + `,"limit":{"requests_per_unit":5,"unit":"minute"},"multiplier":2,"expires_in":"1h"}`,
			wantErr: "invalid override: both limit and multiplier; set one"},
		{name: "neither limit nor multiplier", body: `{` + entries + `,"expires_in":"1h"}`,
			wantErr: "invalid override: neither limit nor multiplier; set one"},
		{name: "unknown unit", body: `{` + entries + `,"limit":{"requests_per_unit":5,"unit":"fortnight"},"expires_in":"1h"}`,
			wantErr: `invalid override: limit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`},
		{name: "expiry in the past", body: `{` + entries + `,"multiplier":2,"expires_at":"2025-12-31T00:00:00Z"}`,
			wantErr: "invalid override: expiry 2025-12-31T00:00:00Z is in the past"},
		{name: "expiry too far", body: `{` + entries + `,"multiplier":2,"expires_in":"721h"}`,
			wantErr: "invalid override: expiry 2026-01-31T01:00:30Z is more than the maximum 720h0m0s away"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t)
			rec := s.do(aliceToken, http.MethodPost, "/v1/overrides", tc.body)
			if tc.wantErr != "" {
				if want := errorJSON(http.StatusBadRequest, tc.wantErr); rec.Code != http.StatusBadRequest || rec.Body.String() != want {
					t.Fatalf("answer %d %s, want 400 %s", rec.Code, rec.Body, want)
				}
				if got := s.audit.Last(0); len(got) != 0 {
					t.Errorf("a refused override was audited: %+v", got)
				}
				return
			}
			if rec.Code != http.StatusCreated {
				t.Fatalf("answer %d %s, want 201", rec.Code, rec.Body)
			}
			got := decode[override.Override](t, rec.Body.String())
			if len(got.ID) == 0 || rec.Header().Get("Location") != "/v1/overrides/"+got.ID {
				t.Errorf("id %q, Location %q", got.ID, rec.Header().Get("Location"))
			}
			want := tc.want
			want.ID = got.ID
			if !reflect.DeepEqual(got, want) {
				t.Errorf("stored\n%+v\nwant\n%+v", got, want)
			}
			entries := s.audit.Last(0)
			if len(entries) != 1 || entries[0].Actor != "alice" || entries[0].Action != audit.ActionOverrideCreate ||
				entries[0].Target != got.ID || entries[0].Reason != want.Reason || entries[0].Before != nil {
				t.Errorf("audit %+v, want one override.create by alice of %s", entries, got.ID)
			}
		})
	}
}

// TestOverrideLifecycle creates, reads, applies, lists and deletes an
// override through the API.
func TestOverrideLifecycle(t *testing.T) {
	s := newServer(t)
	check := `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]}]}`
	remainingLimit := func() string {
		t.Helper()
		code, body := s.call(t, envToken, http.MethodPost, "/v1/remaining", check)
		if code != http.StatusOK {
			t.Fatalf("remaining: %d %s", code, body)
		}
		st := decode[httpapi.CheckResponse](t, body).Statuses[0]
		return itoa(int(st.Limit.RequestsPerUnit)) + " " + st.Limit.Name
	}
	if got := remainingLimit(); got != "2 " {
		t.Fatalf("limit before the override: %q, want 2", got)
	}

	code, body := s.call(t, aliceToken, http.MethodPost, "/v1/overrides",
		`{"domain":"api","entries":[{"key":"api_key","value":"k1"}],"multiplier":5,"expires_in":"1h","reason":"launch"}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	created := decode[override.Override](t, body)
	if got, want := remainingLimit(), "10 override:"+created.ID; got != want {
		t.Errorf("limit under the override: %q, want %q", got, want)
	}

	for _, tc := range []struct {
		target string
		want   []string // ids
	}{
		{"/v1/overrides", []string{created.ID}},
		{"/v1/overrides?domain=api", []string{created.ID}},
		{"/v1/overrides?domain=web", []string{}},
	} {
		code, body := s.call(t, envToken, http.MethodGet, tc.target, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", tc.target, code, body)
		}
		ids := []string{}
		for _, o := range decode[struct{ Overrides []override.Override }](t, body).Overrides {
			ids = append(ids, o.ID)
		}
		if !reflect.DeepEqual(ids, tc.want) {
			t.Errorf("GET %s: %v, want %v", tc.target, ids, tc.want)
		}
	}
	code, body = s.call(t, envToken, http.MethodGet, "/v1/overrides/"+created.ID, "")
	if got := decode[override.Override](t, body); code != http.StatusOK || !reflect.DeepEqual(got, created) {
		t.Errorf("GET one: %d %+v, want %+v", code, got, created)
	}

	code, body = s.call(t, envToken, http.MethodDelete, "/v1/overrides/"+created.ID+"?reason=launch+over", "")
	if got := decode[override.Override](t, body); code != http.StatusOK || !reflect.DeepEqual(got, created) {
		t.Errorf("DELETE: %d %+v, want %+v", code, got, created)
	}
	if got := remainingLimit(); got != "2 " {
		t.Errorf("limit after the delete: %q, want 2", got)
	}
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		code, body := s.call(t, envToken, method, "/v1/overrides/"+created.ID, "")
		want := errorJSON(http.StatusNotFound, `override "`+created.ID+`": override not found`)
		if method == http.MethodDelete {
			want = errorJSON(http.StatusNotFound, `deleting override "`+created.ID+`": override not found`)
		}
		if code != http.StatusNotFound || body != want {
			t.Errorf("%s of a deleted override: %d %s, want 404 %s", method, code, body, want)
		}
	}

	// The audit, through the API and as written.
	code, body = s.call(t, envToken, http.MethodGet, "/v1/audit", "")
	if code != http.StatusOK {
		t.Fatalf("audit: %d %s", code, body)
	}
	type entry struct {
		Actor, Action, Target, Reason string
		Before, After                 map[string]any
	}
	got := decode[struct{ Entries []entry }](t, body).Entries
	if len(got) != 2 ||
		got[0].Actor != "alice" || got[0].Action != "override.create" || got[0].Target != created.ID || got[0].Reason != "launch" ||
		got[0].Before != nil || got[0].After["id"] != created.ID ||
		got[1].Actor != "env" || got[1].Action != "override.delete" || got[1].Reason != "launch over" ||
		got[1].Before["id"] != created.ID || got[1].After != nil {
		t.Errorf("audit entries %+v", got)
	}
	if lines := strings.Count(s.auditLines.String(), "\n"); lines != 2 {
		t.Errorf("the audit wrote %d lines, want 2:\n%s", lines, s.auditLines)
	}
	if !strings.Contains(s.logs.String(), "deleted_by=env") {
		t.Errorf("the registry did not log who deleted:\n%s", s.logs)
	}
}

func TestRemainingConsumesNothing(t *testing.T) {
	s := newServer(t)
	k1 := `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k1"}],"hits":5,"refund":true}]}`
	k1check := `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]}]}`
	remaining := func() httpapi.CheckResponse {
		t.Helper()
		rec := s.do(aliceToken, http.MethodPost, "/v1/remaining", k1)
		if rec.Code != http.StatusOK {
			t.Fatalf("remaining: %d %s", rec.Code, rec.Body)
		}
		if h := rec.Header().Get("X-RateLimit-Remaining"); h != "" {
			t.Errorf("remaining set the decision's header X-RateLimit-Remaining: %q", h)
		}
		return decode[httpapi.CheckResponse](t, rec.Body.String())
	}
	for i, want := range []uint32{2, 2, 1, 1, 0, 0} {
		got := remaining()
		wantCode := "OK"
		if want == 0 {
			wantCode = "OVER_LIMIT"
		}
		st := got.Statuses[0]
		wantReset := 30.0 // the window's end
		if want == 2 {
			wantReset = 0 // nothing counted, nothing to reset
		}
		if *st.Remaining != want || got.Code != wantCode || st.Limit.RequestsPerUnit != 2 || st.ResetAfterSeconds != wantReset {
			t.Fatalf("step %d: %+v, status %+v; want remaining %d, %s", i, got, st, want, wantCode)
		}
		if i == 1 || i == 3 { // one hit after two looks
			if code, body := s.call(t, "", http.MethodPost, "/v1/check", k1check); code != http.StatusOK {
				t.Fatalf("check %d: %d %s", i, code, body)
			}
		}
	}

	code, body := s.call(t, aliceToken, http.MethodPost, "/v1/remaining", `{"domain":"","descriptors":[]}`)
	if want := errorJSON(http.StatusBadRequest, "invalid rate-limit request: empty domain"); code != http.StatusBadRequest || body != want {
		t.Errorf("invalid request: %d %s, want 400 %s", code, body, want)
	}
	code, body = s.call(t, aliceToken, http.MethodPost, "/v1/remaining", `{"domain":"api","descriptors":[],"extra":1}`)
	if want := errorJSON(http.StatusBadRequest, `decoding request body: json: unknown field "extra"`); code != http.StatusBadRequest || body != want {
		t.Errorf("unknown field: %d %s, want 400 %s", code, body, want)
	}
}

func TestReset(t *testing.T) {
	s := newServer(t)
	both := `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]},{"entries":[{"key":"api_key","value":"k1"},{"key":"endpoint","value":"/a"}]},{"entries":[{"key":"tier","value":"vip"}]}]}`
	k1 := `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]}]}`
	for range 2 {
		if code, body := s.call(t, "", http.MethodPost, "/v1/check", k1); code != http.StatusOK {
			t.Fatalf("check: %d %s", code, body)
		}
	}
	if code, body := s.call(t, "", http.MethodPost, "/v1/check", k1); code != http.StatusTooManyRequests {
		t.Fatalf("third check: %d %s, want 429", code, body)
	}

	code, body := s.call(t, aliceToken, http.MethodPost, "/v1/reset?reason=incident+42", both)
	if code != http.StatusOK {
		t.Fatalf("reset: %d %s", code, body)
	}
	want := `{"domain":"api","reset":[` +
		`{"descriptor":0,"entries":[{"key":"api_key","value":"k1"}],"rule":"api_key","limit":{"requests_per_unit":2,"unit":"minute","algorithm":"fixed_window"}},` +
		`{"descriptor":1,"entries":[{"key":"api_key","value":"k1"},{"key":"endpoint","value":"/a"}],"rule":"api_key/endpoint","limit":{"requests_per_unit":10,"unit":"minute","algorithm":"fixed_window"}}` +
		`]}` + "\n"
	if body != want {
		t.Errorf("reset answered\n%s\nwant\n%s", body, want)
	}
	if code, body := s.call(t, "", http.MethodPost, "/v1/check", k1); code != http.StatusOK {
		t.Errorf("check after the reset: %d %s, want 200", code, body)
	}
	entries := s.audit.Last(0)
	if len(entries) != 1 || entries[0].Actor != "alice" || entries[0].Action != audit.ActionReset ||
		entries[0].Target != "api" || entries[0].Reason != "incident 42" {
		t.Errorf("audit %+v, want one reset by alice", entries)
	}

	for _, tc := range []struct{ body, want string }{
		{`{"domain":"web","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]}]}`, `{"domain":"web","reset":[]}` + "\n"},
	} {
		if code, body := s.call(t, aliceToken, http.MethodPost, "/v1/reset", tc.body); code != http.StatusOK || body != tc.want {
			t.Errorf("reset %s: %d %s, want 200 %s", tc.body, code, body, tc.want)
		}
	}
	for _, tc := range []struct{ body, wantErr string }{
		{`{"domain":"api","descriptors":[{"entries":[]}]}`, "invalid rate-limit request: descriptors[0]: no entries"},
		{`[]`, "decoding request body: json: cannot unmarshal array into Go value of type httpapi.checkRequest"},
	} {
		code, body := s.call(t, aliceToken, http.MethodPost, "/v1/reset", tc.body)
		if want := errorJSON(http.StatusBadRequest, tc.wantErr); code != http.StatusBadRequest || body != want {
			t.Errorf("reset %s: %d %s, want 400 %s", tc.body, code, body, want)
		}
	}
	if got := len(s.audit.Last(0)); got != 2 {
		t.Errorf("%d audit entries, want 2: the reset of nothing is audited, refusals are not", got)
	}
}

func TestAuditLimit(t *testing.T) {
	s := newServer(t)
	for i := range 3 {
		s.audit.Record(t.Context(), audit.Entry{Actor: "reload", Action: audit.ActionReload, Target: itoa(i)})
	}
	for _, tc := range []struct {
		query   string
		want    []string
		wantErr string
	}{
		{"", []string{"0", "1", "2"}, ""},
		{"?limit=2", []string{"1", "2"}, ""},
		{"?limit=10", []string{"0", "1", "2"}, ""},
		{"?limit=0", nil, `limit: want a positive number, got "0"`},
		{"?limit=x", nil, `limit: want a positive number, got "x"`},
	} {
		code, body := s.call(t, aliceToken, http.MethodGet, "/v1/audit"+tc.query, "")
		if tc.wantErr != "" {
			if want := errorJSON(http.StatusBadRequest, tc.wantErr); code != http.StatusBadRequest || body != want {
				t.Errorf("%s: %d %s, want 400 %s", tc.query, code, body, want)
			}
			continue
		}
		var targets []string
		for _, e := range decode[struct{ Entries []audit.Entry }](t, body).Entries {
			targets = append(targets, e.Target)
		}
		if code != http.StatusOK || !reflect.DeepEqual(targets, tc.want) {
			t.Errorf("%s: %d %v, want %v", tc.query, code, targets, tc.want)
		}
	}
}

// TestTokensStayOut makes every kind of call, with good and bad tokens,
// and checks that no token reaches the logs, the audit or an answer.
func TestTokensStayOut(t *testing.T) {
	s := newServer(t)
	const wrong = "wrong-token-5e0f7a"
	for _, token := range []string{aliceToken, envToken, wrong} {
		for _, r := range routes {
			s.call(t, token, r.method, r.target, r.body)
		}
		s.call(t, token, http.MethodPost, "/v1/overrides",
			`{"domain":"api","entries":[{"key":"api_key","value":"k1"}],"multiplier":2,"expires_in":"1h"}`)
		s.call(t, token, http.MethodPost, "/v1/reset", `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]}]}`)
	}
	_, answer := s.call(t, aliceToken, http.MethodGet, "/v1/audit", "")
	if !strings.Contains(s.logs.String(), "unknown token refused") || !strings.Contains(answer, `"actor":"alice"`) {
		t.Fatalf("the calls were not logged and audited:\n%s\n%s", s.logs, answer)
	}
	for where, text := range map[string]string{"logs": s.logs.String(), "audit log": s.auditLines.String(), "/v1/audit": answer} {
		for _, token := range []string{aliceToken, envToken, wrong} {
			if strings.Contains(text, token) {
				t.Errorf("the %s show the token %q:\n%s", where, token, text)
			}
		}
	}
}

func TestNewRequiresOptions(t *testing.T) {
	_, err := admin.New(admin.Options{})
	if want := "admin: missing options Audit, Limiter, Overrides, Resetter, Tokens"; err == nil || err.Error() != want {
		t.Errorf("New with no options: %v, want %q", err, want)
	}
}

// TestRefusalsLogThrottled checks that refused calls are logged at most
// once a second, the next line counting those left unlogged.
func TestRefusalsLogThrottled(t *testing.T) {
	s := newServer(t)
	for range 5 {
		if code, _ := s.call(t, "wrong-token", http.MethodGet, "/v1/overrides", ""); code != http.StatusUnauthorized {
			t.Fatalf("a wrong token: %d", code)
		}
	}
	if n := strings.Count(s.logs.String(), "unknown token refused"); n != 1 {
		t.Fatalf("5 refusals within a second logged %d lines, want 1:\n%s", n, s.logs)
	}
	s.at = s.at.Add(time.Second)
	s.call(t, "", http.MethodGet, "/v1/overrides", "")
	if logs := s.logs.String(); !strings.Contains(logs, "without a bearer token refused") || !strings.Contains(logs, "unlogged_refusals=4") {
		t.Fatalf("a refusal a second later did not log the 4 left unlogged:\n%s", logs)
	}
}

// TestHashedValues runs every admin route with a secret-looking value
// under ValuesHash: no answer, audit entry or log line shows it, they show
// its hash, and the calls that take it plain still act on it.
func TestHashedValues(t *testing.T) {
	const secret = "sk-live-4f9c2a7e1b8d"
	hashed := descriptor.ValuesHash.Show(secret)
	s := newServerShowing(t, descriptor.ValuesHash)
	var answers []string
	call := func(method, target, body string, wantCode int) string {
		t.Helper()
		code, got := s.call(t, aliceToken, method, target, body)
		if code != wantCode {
			t.Fatalf("%s %s: %d %s, want %d", method, target, code, got, wantCode)
		}
		answers = append(answers, got)
		return got
	}
	check := `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"` + secret + `"}]}]}`
	limitName := func() string {
		t.Helper()
		return decode[httpapi.CheckResponse](t, call(http.MethodPost, "/v1/remaining", check, http.StatusOK)).Statuses[0].Limit.Name
	}

	created := decode[override.Override](t, call(http.MethodPost, "/v1/overrides",
		`{"domain":"api","entries":[{"key":"api_key","value":"`+secret+`"}],"multiplier":5,"expires_in":"1h"}`, http.StatusCreated))
	want := []descriptor.Entry{{Key: "api_key", Value: hashed}}
	if !reflect.DeepEqual(created.Entries, want) {
		t.Errorf("created entries %v, want %v", created.Entries, want)
	}
	if got := limitName(); got != "override:"+created.ID {
		t.Errorf("the plain value's limit %q, want override:%s: the override must apply to the value it was made with", got, created.ID)
	}
	list := decode[struct{ Overrides []override.Override }](t, call(http.MethodGet, "/v1/overrides", "", http.StatusOK)).Overrides
	if len(list) != 1 || !reflect.DeepEqual(list[0], created) {
		t.Errorf("listed %+v, want %+v", list, created)
	}
	if got := decode[override.Override](t, call(http.MethodGet, "/v1/overrides/"+created.ID, "", http.StatusOK)); !reflect.DeepEqual(got, created) {
		t.Errorf("GET one: %+v, want %+v", got, created)
	}
	refused := call(http.MethodPost, "/v1/overrides",
		`{"domain":"api","entries":[{"key":"tier","value":"`+secret+`"}],"multiplier":2,"expires_in":"1h"}`, http.StatusBadRequest)
	if want := errorJSON(http.StatusBadRequest, `invalid override: entries tier=`+hashed+` resolve to no rule with a limit in domain "api"`); refused != want {
		t.Errorf("refusal %s, want %s", refused, want)
	}
	reset := call(http.MethodPost, "/v1/reset", check, http.StatusOK)
	if want := `{"domain":"api","reset":[{"descriptor":0,"entries":[{"key":"api_key","value":"` + hashed + `"}],"rule":"api_key",` +
		`"limit":{"name":"override:` + created.ID + `","requests_per_unit":10,"unit":"minute","algorithm":"fixed_window"}}]}` + "\n"; reset != want {
		t.Errorf("reset answered\n%s\nwant\n%s", reset, want)
	}
	if got := decode[override.Override](t, call(http.MethodDelete, "/v1/overrides/"+created.ID, "", http.StatusOK)); !reflect.DeepEqual(got, created) {
		t.Errorf("DELETE: %+v, want %+v", got, created)
	}
	if got := limitName(); got != "" {
		t.Errorf("the plain value's limit after the delete %q, want the rule's", got)
	}
	audited := call(http.MethodGet, "/v1/audit", "", http.StatusOK)

	for name, text := range map[string]string{
		"answers": strings.Join(answers, ""), "the audit's lines": s.auditLines.String(), "the log": s.logs.String(),
	} {
		if strings.Contains(text, secret) {
			t.Errorf("%s show %s:\n%s", name, secret, text)
		}
	}
	for name, text := range map[string]string{"/v1/audit": audited, "the audit's lines": s.auditLines.String(), "the log": s.logs.String()} {
		if n := strings.Count(text, hashed); n < 2 {
			t.Errorf("%s show %s %d times, want the create and the delete at least:\n%s", name, hashed, n, text)
		}
	}
}

// topObserver lets the limiter tell the top summaries about every
// decision, as the app does.
type topObserver struct{ rec *top.Recorder }

func (o topObserver) Rule(domain, rule, limit string, lim *descriptor.Limit) limiter.RuleObserver {
	return o.rec.Rule(domain, rule, limit, lim)
}
