package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/pkg/app"
)

// tryDoc is the "Try it with Envoy" walkthrough. Its requests and the
// descriptors Envoy makes of them are rows of envoy/README.md's table,
// which envoy/envoy_test.go checks against envoy.yaml; this test checks
// what tollgate answers to those descriptors.
const tryDoc = "../README.md"

// tryEdit is the walkthrough's live edit, the sed expression of the README's "Try it with Envoy".
var tryEdit = regexp.MustCompile(`(?m)requests_per_unit: 30$`)

// TestTryItAnswers runs the walkthrough's requests, as the descriptors
// Envoy sends for them, against tollgate on a copy of config-examples/
// with the demo's settings, and checks the answers the README quotes.
func TestTryItAnswers(t *testing.T) {
	doc, err := os.ReadFile(tryDoc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	examples, err := filepath.Glob("../config-examples/*") // rules and the values files they name
	if err != nil || len(examples) == 0 {
		t.Fatalf("config-examples: %v", err)
	}
	for _, f := range examples {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, filepath.Base(f)), string(data))
	}
	svc := startServiceIn(t, dir, func(s *app.Settings) { s.Answers.Headers = "none" })
	const peer = "172.18.0.1" // Envoy's view of a client on the compose network

	type want struct {
		code      rlsv3.RateLimitResponse_Code
		limit     uint32 // requests_per_unit of the first limited status
		remaining uint32
		policy    string // X-RateLimit-Policy
		body      string // a prefix of the body, quoted in the README
	}
	check := func(t *testing.T, what string, resp *rlsv3.RateLimitResponse, w want) {
		t.Helper()
		if resp.OverallCode != w.code {
			t.Fatalf("%s: %v, want %v", what, resp.OverallCode, w.code)
		}
		var limited *rlsv3.RateLimitResponse_DescriptorStatus
		for _, st := range resp.Statuses {
			if st.CurrentLimit != nil && limited == nil {
				limited = st
			}
		}
		if w.limit > 0 && (limited == nil || limited.CurrentLimit.RequestsPerUnit != w.limit || limited.LimitRemaining != w.remaining) {
			t.Errorf("%s: limited status %v, want limit %d remaining %d", what, limited, w.limit, w.remaining)
		}
		if got := header(resp, "X-RateLimit-Policy"); got != w.policy {
			t.Errorf("%s: X-RateLimit-Policy %q, want %q", what, got, w.policy)
		}
		if w.code == rlsv3.RateLimitResponse_OVER_LIMIT && header(resp, "Retry-After") == "" {
			t.Errorf("%s: no Retry-After", what)
		}
		for _, h := range resp.ResponseHeadersToAdd {
			if strings.HasPrefix(strings.ToLower(h.Key), "x-ratelimit-") && !strings.EqualFold(h.Key, "X-RateLimit-Policy") {
				t.Errorf("%s: tollgate adds %s although the demo runs --response-headers none", what, h.Key)
			}
		}
		body := string(resp.RawBody)
		if !strings.HasPrefix(body, w.body) {
			t.Errorf("%s: body %q, want it to start %q", what, body, w.body)
		}
		if w.body != "" && !strings.Contains(string(doc), w.body) {
			t.Errorf("%s: %s does not quote the body %q", what, tryDoc, w.body)
		}
	}

	check(t, "/search k1", svc.query(t, "endpoints", entries("api_key", "k1", "endpoint", "/search")),
		want{code: rlsv3.RateLimitResponse_OK, limit: 30, remaining: 29})
	for i := range 5 {
		check(t, "/export", svc.query(t, "algorithms", entries("client", "report")),
			want{code: rlsv3.RateLimitResponse_OK, limit: 5, remaining: uint32(4 - i)})
	}
	check(t, "6th /export", svc.query(t, "algorithms", entries("client", "report")),
		want{code: rlsv3.RateLimitResponse_OVER_LIMIT, limit: 5, remaining: 0,
			body: `{"code":429,"message":"rate limit exceeded","limit":5,"window":300,"retry_after_seconds":`})
	check(t, "sk_internal_build", svc.query(t, "access", entries("api_key", "sk_internal_build"), entries("remote_address", peer)),
		want{code: rlsv3.RateLimitResponse_OK, limit: 20, remaining: 19, policy: "allowlist"})
	for _, key := range []string{"sk_revoked_2024", "sk_internal_leaked"} {
		check(t, key, svc.query(t, "access", entries("api_key", key), entries("remote_address", peer)),
			want{code: rlsv3.RateLimitResponse_OVER_LIMIT, limit: 20, remaining: 19, policy: "denylist",
				body: `{"code":429,"message":"request denied by policy","retry_after_seconds":1}`})
	}

	// The live edit: the sed line of the README, applied to the copy.
	if !strings.Contains(string(doc), `'s/requests_per_unit: 30$/requests_per_unit: 3/'`) {
		t.Fatalf("%s no longer edits with the expression this test applies (%s)", tryDoc, tryEdit)
	}
	path := filepath.Join(dir, "endpoints.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tryEdit.FindAllIndex(data, -1)); n != 1 {
		t.Fatalf("the edit matches %d lines of endpoints.yaml, want 1", n)
	}
	// The first line is "# hash H, loaded T": only H tells the edit from
	// a reload of the same rules.
	hash := func() string {
		h, _, _ := strings.Cut(svc.get(t, svc.debugAddr, "/debug/config"), ",")
		return h
	}
	before := hash()
	writeFile(t, path, tryEdit.ReplaceAllString(string(data), "requests_per_unit: 3"))
	polltest.EventuallyEvery(t, 10*time.Second, pollEvery, func() bool { return hash() != before }, "the edit to be reloaded")
	for i := range 3 {
		check(t, "/search k2 after the edit", svc.query(t, "endpoints", entries("api_key", "k2", "endpoint", "/search")),
			want{code: rlsv3.RateLimitResponse_OK, limit: 3, remaining: uint32(2 - i)})
	}
	check(t, "4th /search k2 after the edit", svc.query(t, "endpoints", entries("api_key", "k2", "endpoint", "/search")),
		want{code: rlsv3.RateLimitResponse_OVER_LIMIT, limit: 3, remaining: 0})
}
