package app_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/pkg/admin"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// shadowRulesOf gives each client limit calls an hour, in a token bucket:
// no window ends during the test.
func shadowRulesOf(limit int) string {
	return fmt.Sprintf(`domain: api
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: %d, name: per_client}
`, limit)
}

const shadowToken = "shadow-test-token-5c1e"

// TestShadowRules runs a tollgate whose live rules allow 5 calls per
// client and whose shadow rules allow 2, then 1 after an edit, and keep 1
// through a broken edit: the answers are the live rules', and the shadow
// metrics, status and top clients are the shadow rules'.
func TestShadowRules(t *testing.T) {
	dir, shadowDir := t.TempDir(), t.TempDir()
	apptest.WriteFile(t, filepath.Join(dir, "api.yaml"), shadowRulesOf(5))
	apptest.WriteFile(t, filepath.Join(shadowDir, "api.yaml"), shadowRulesOf(2))
	logs := &logtest.Buffer{}
	svc := apptest.Start(t, dir, apptest.Options{
		Logger:   slog.New(slog.NewJSONHandler(logs, nil)),
		Settings: func(s *app.Settings) { s.Shadow.ConfigDir, s.Admin.Token = shadowDir, shadowToken },
	})
	client, err := rlsclient.Dial(svc.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// check sends one call of value over gRPC, or over HTTP's /v1/check,
	// and returns its code.
	check := func(value string, overHTTP bool) string {
		t.Helper()
		if overHTTP {
			body := `{"domain":"api","descriptors":[{"entries":[{"key":"client","value":"` + value + `"}]}]}`
			resp, err := http.Post("http://"+svc.HTTPAddr+"/v1/check", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return map[int]string{http.StatusOK: "OK", http.StatusTooManyRequests: "OVER_LIMIT"}[resp.StatusCode]
		}
		resp, err := client.Query(t.Context(), rlsclient.Request{Domain: "api", Descriptors: [][]descriptor.Entry{{{Key: "client", Value: value}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode.String()
	}
	status := func() *admin.ShadowStatus {
		t.Helper()
		var st admin.Status
		if code := apptest.GetJSON(t, "http://"+svc.AdminAddr+"/v1/status", shadowToken, &st); code != http.StatusOK {
			t.Fatalf("GET /v1/status: %d", code)
		}
		if st.Shadow == nil {
			t.Fatal("GET /v1/status says nothing of the shadow rules")
		}
		return st.Shadow
	}
	// expect sends calls and checks their live answers, waits until the
	// shadow rules decided decided calls in all, then checks the shadow
	// series.
	expect := func(calls []string, wantCodes []string, decided int64, ok, over, newlyRejected int) {
		t.Helper()
		var codes []string
		for i, value := range calls {
			codes = append(codes, check(value, i == 2))
		}
		if !slices.Equal(codes, wantCodes) {
			t.Fatalf("live answers %v, want %v: the live rules' alone", codes, wantCodes)
		}
		polltest.Eventually(t, 10*time.Second, func() bool { return status().Decided == decided },
			"the shadow rules did not decide %d calls: %+v", decided, status())
		body := apptest.Get(t, "http://"+svc.HTTPAddr+"/metrics")
		for _, want := range []string{
			fmt.Sprintf(`tollgate_shadow_decisions_total{domain="api",limit="per_client",result="ok",rule="client"} %d`, ok),
			fmt.Sprintf(`tollgate_shadow_decisions_total{domain="api",limit="per_client",result="over_limit",rule="client"} %d`, over),
			fmt.Sprintf(`tollgate_shadow_differences_total{change="newly_rejected",domain="api"} %d`, newlyRejected),
		} {
			if !strings.Contains(body, "\n"+want+"\n") {
				t.Errorf("scrape lacks the line %s; it has:\n%s", want, grepLines(body, "tollgate_shadow"))
			}
		}
		if strings.Contains(body, `change="newly_admitted"`) || strings.Contains(body, "tollgate_shadow_dropped_total") {
			t.Errorf("calls newly admitted or dropped:\n%s", grepLines(body, "tollgate_shadow"))
		}
		problems, err := promlint.New(strings.NewReader(body)).Lint()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("metric %s: %s", p.Metric, p.Text)
		}
	}

	// Limit 5 live, 2 in the shadow: the third call of a is the first
	// the shadow rules reject, the sixth the first the live ones do.
	first := status().Rules
	if first.Hash == "" || first.Source != shadowDir {
		t.Fatalf("shadow rules at the start: %+v", first)
	}
	expect([]string{"a", "a", "a", "a", "a", "a"}, []string{"OK", "OK", "OK", "OK", "OK", "OVER_LIMIT"}, 6, 2, 4, 3)

	var topAnswer struct {
		Entries []struct {
			Descriptor []descriptor.Entry `json:"descriptor"`
			Requests   uint64             `json:"requests"`
			Rejected   uint64             `json:"rejected"`
		} `json:"entries"`
	}
	apptest.GetJSON(t, "http://"+svc.AdminAddr+"/v1/top?set=shadow&domain=api", shadowToken, &topAnswer)
	if e := topAnswer.Entries; len(e) != 1 || e[0].Descriptor[0].Value != "a" || e[0].Requests != 6 || e[0].Rejected != 4 {
		t.Errorf("GET /v1/top?set=shadow = %+v, want a with 6 requests, 4 rejected", e)
	}

	var rules struct {
		Rules []struct {
			Rule            string `json:"rule"`
			RequestsPerUnit uint32 `json:"requests_per_unit"`
		} `json:"rules"`
	}
	apptest.GetJSON(t, "http://"+svc.AdminAddr+"/v1/rules?set=shadow&domain=api", shadowToken, &rules)
	if r := rules.Rules; len(r) != 1 || r[0].Rule != "client" || r[0].RequestsPerUnit != 2 {
		t.Errorf("GET /v1/rules?set=shadow = %+v, want the shadow limit of 2", r)
	}
	if code := apptest.Status(t, http.MethodGet, "http://"+svc.AdminAddr+"/v1/top?set=other&domain=api", shadowToken); code != http.StatusBadRequest {
		t.Errorf("GET /v1/top?set=other: %d, want 400", code)
	}

	// An edit lowers the shadow limit to 1.
	apptest.WriteFile(t, filepath.Join(shadowDir, "api.yaml"), shadowRulesOf(1))
	polltest.Eventually(t, 10*time.Second, func() bool { return status().Rules.Hash != first.Hash },
		"the edited shadow rules were not loaded")
	expect([]string{"b", "b"}, []string{"OK", "OK"}, 8, 3, 5, 4)

	// A broken edit keeps the limit of 1, and says why.
	edited := status().Rules
	apptest.WriteFile(t, filepath.Join(shadowDir, "api.yaml"), "domain: api\nbogus: 1\n")
	polltest.Eventually(t, 10*time.Second, func() bool { return status().Rules.LastError != "" },
		"the broken shadow rules were not rejected")
	if st := status().Rules; st.Hash != edited.Hash || st.Failures != 1 || !strings.Contains(st.LastError, "api.yaml") {
		t.Fatalf("shadow rules after a broken edit: %+v, want %s kept and the error", st, edited.Hash)
	}
	expect([]string{"c", "c"}, []string{"OK", "OK"}, 10, 4, 6, 5)
	if !regexp.MustCompile(`"level":"ERROR","msg":"descriptor configuration rejected; previous tree stays live","component":"shadow"`).MatchString(logs.String()) {
		t.Errorf("no error of component shadow logged for the broken edit:\n%s", logs)
	}
}

// grepLines returns the lines of body that contain substr.
func grepLines(body, substr string) string {
	var b strings.Builder
	for line := range strings.Lines(body) {
		if strings.Contains(line, substr) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestShadowRulesBrokenAtStart checks that shadow rules broken from the
// start keep neither the service from starting nor the live rules from
// answering, and are loaded once fixed.
func TestShadowRulesBrokenAtStart(t *testing.T) {
	dir, shadowDir := t.TempDir(), t.TempDir()
	apptest.WriteFile(t, filepath.Join(dir, "api.yaml"), shadowRulesOf(5))
	apptest.WriteFile(t, filepath.Join(shadowDir, "api.yaml"), "domain: api\nbogus: 1\n")
	svc := apptest.Start(t, dir, apptest.Options{
		Settings: func(s *app.Settings) { s.Shadow.ConfigDir, s.Admin.Token = shadowDir, shadowToken },
	})
	status := func() admin.RulesStatus {
		t.Helper()
		var st admin.Status
		apptest.GetJSON(t, "http://"+svc.AdminAddr+"/v1/status", shadowToken, &st)
		if st.Shadow == nil {
			t.Fatal("GET /v1/status says nothing of the shadow rules")
		}
		return st.Shadow.Rules
	}
	if st := status(); st.Hash != "" || !strings.Contains(st.LastError, "api.yaml") {
		t.Fatalf("shadow rules broken at the start: %+v, want no hash and the error", st)
	}
	client, err := rlsclient.Dial(svc.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	resp, err := client.Query(t.Context(), rlsclient.Request{Domain: "api", Descriptors: [][]descriptor.Entry{{{Key: "client", Value: "a"}}}})
	if err != nil || resp.OverallCode.String() != "OK" {
		t.Fatalf("a live call with the shadow rules broken: %v, %v", resp, err)
	}
	apptest.WriteFile(t, filepath.Join(shadowDir, "api.yaml"), shadowRulesOf(2))
	polltest.Eventually(t, 10*time.Second, func() bool { return status().Hash != "" }, "the fixed shadow rules were not loaded")
}

// TestShadowTopWithoutShadowRules checks that an instance without shadow
// rules answers their top clients 404, and its own as before.
func TestShadowTopWithoutShadowRules(t *testing.T) {
	a := apptest.StartAdmin(t)
	for target, want := range map[string]int{
		"/v1/top?set=shadow&domain=api": http.StatusNotFound,
		"/v1/rules?set=shadow":          http.StatusNotFound,
		"/v1/top?set=live&domain=api":   http.StatusOK,
		"/v1/rules":                     http.StatusOK,
	} {
		if code := apptest.Status(t, http.MethodGet, "http://"+a.AdminAddr+target, apptest.OpsToken); code != want {
			t.Errorf("GET %s: %d, want %d", target, code, want)
		}
	}
}
