package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/pkg/admin"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/reload"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// TestAdminTokenRotation edits the running tollgate's token file and
// checks that the new token works and the removed one stops working.
func TestAdminTokenRotation(t *testing.T) {
	a := apptest.StartAdmin(t)
	url := "http://" + a.AdminAddr + "/v1/audit"
	if got := apptest.Status(t, http.MethodGet, url, apptest.OpsToken); got != http.StatusOK {
		t.Fatalf("the file's token: %d", got)
	}
	apptest.WriteFile(t, a.TokenFile, "ops2 rotated-token-5c1f\n")
	// Waited for in the log, not by trying the token: refused tries would
	// spend the address's refusals (the admin API's throttle).
	polltest.Eventually(t, 5*time.Second, func() bool { return strings.Contains(a.Logs.String(), "admin tokens reloaded") },
		"the token file to be read again")
	if got := apptest.Status(t, http.MethodGet, url, "rotated-token-5c1f"); got != http.StatusOK {
		t.Errorf("the new token: %d, want 200", got)
	}
	if got := apptest.Status(t, http.MethodGet, url, apptest.OpsToken); got != http.StatusUnauthorized {
		t.Errorf("the removed token: %d, want 401", got)
	}
	if got := apptest.Status(t, http.MethodGet, url, apptest.EnvToken); got != http.StatusOK {
		t.Errorf("the environment's token after the rotation: %d, want 200", got)
	}
}

// TestReloadAudited changes the rules of a running tollgate and checks the
// audit log's line for it.
func TestReloadAudited(t *testing.T) {
	a := apptest.StartAdmin(t)
	before := a.Reloader().Status().Hash
	apptest.WriteFile(t, filepath.Join(a.Dir, "web.yaml"), "domain: web\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	apptest.WriteFile(t, filepath.Join(a.Dir, "api.yaml"), strings.Replace(apptest.AdminRules, "requests_per_unit: 2", "requests_per_unit: 3", 1))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := a.Reloader().Reload(ctx); err != nil {
		t.Fatal(err)
	}
	after := a.Reloader().Status().Hash
	data, err := os.ReadFile(a.AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	var line struct {
		Actor, Action, Target string
		Before                map[string]any
		After                 map[string]any
	}
	if err := json.Unmarshal(data, &line); err != nil {
		t.Fatalf("audit log %q: %v", data, err)
	}
	if line.Actor != "reload" || line.Action != "reload" || line.Target != a.Dir ||
		!reflect.DeepEqual(line.Before, map[string]any{"hash": before}) ||
		!reflect.DeepEqual(line.After, map[string]any{"hash": after, "added": []any{"web"}, "changed": []any{"api"}}) {
		t.Errorf("audit log line %s\nwant a reload from %s to %s adding web, changing api", data, before, after)
	}
}

// TestAdminListener checks that the admin API has a listener of its own
// and nothing else does: the public listener answers the admin paths and
// the status page 404 with a pointer to it, the admin listener serves no
// public path, the status page loads there without a token, the start-up
// log names its address, and without a token it does not open.
func TestAdminListener(t *testing.T) {
	a := apptest.StartAdmin(t)
	public, admin := "http://"+a.HTTPAddr, "http://"+a.AdminAddr
	for _, c := range []struct {
		method, url string
		want        int
	}{
		{http.MethodGet, admin + "/v1/audit", http.StatusOK},
		{http.MethodGet, admin + "/v1/overrides", http.StatusOK},
		{http.MethodGet, public + "/v1/audit", http.StatusNotFound},
		{http.MethodGet, public + "/v1/overrides", http.StatusNotFound},
		{http.MethodPost, public + "/v1/reset", http.StatusNotFound},
		{http.MethodPost, public + "/v1/remaining", http.StatusNotFound},
		{http.MethodGet, admin + "/metrics", http.StatusNotFound},
		{http.MethodGet, admin + "/healthcheck", http.StatusNotFound},
		{http.MethodPost, admin + "/v1/check", http.StatusNotFound},
		{http.MethodGet, public + "/ui/", http.StatusNotFound},
	} {
		if got := apptest.Status(t, c.method, c.url, apptest.OpsToken); got != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.url, got, c.want)
		}
	}
	if got := apptest.Status(t, http.MethodGet, admin+"/ui/", ""); got != http.StatusOK {
		t.Errorf("the status page without a token: %d, want 200 (it holds no data)", got)
	}
	resp, err := http.Get(public + "/v1/overrides")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "own listener (--admin-addr") {
		t.Errorf("the public listener's answer for an admin path: %s, want a pointer to --admin-addr", body)
	}
	polltest.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(a.Logs.String(), "msg=\"tollgate serving\"")
	}, "the start-up log")
	if logs := a.Logs.String(); !strings.Contains(logs, "admin="+a.AdminAddr) {
		t.Errorf("the start-up log does not name the admin listener %s:\n%s", a.AdminAddr, logs)
	}

	dir := t.TempDir()
	apptest.WriteFile(t, filepath.Join(dir, "api.yaml"), apptest.AdminRules)
	if off := apptest.Start(t, dir, apptest.Options{}); off.AdminAddr != "" {
		t.Errorf("without an admin token the admin listener is open on %s", off.AdminAddr)
	}
}

// TestAdminStatusAndHistory reads GET /v1/status and /v1/rules/history of
// a running tollgate, before and after a broken edit of its rules.
func TestAdminStatusAndHistory(t *testing.T) {
	a := apptest.StartAdmin(t)
	get := func(path string, v any) {
		t.Helper()
		if code := apptest.GetJSON(t, "http://"+a.AdminAddr+path, apptest.OpsToken, v); code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
	}
	var st admin.Status
	get("/v1/status", &st)
	if st.Store != "memory" || st.Breaker != "" || st.Fleet != nil || st.Rules.Source != a.Dir || st.Rules.Hash != a.Reloader().Status().Hash || st.Rules.LastError != "" {
		t.Errorf("status %+v, want the memory store, no breaker or fleet, and the live rules of %s", st, a.Dir)
	}

	apptest.WriteFile(t, filepath.Join(a.Dir, "api.yaml"), "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := a.Reloader().Reload(ctx); err == nil {
		t.Fatal("the broken edit loaded")
	}
	get("/v1/status", &st)
	if !strings.Contains(st.Rules.LastError, `unknown unit "fortnight"`) || st.Rules.Failures != 1 {
		t.Errorf("status after a broken edit: %+v, want its error and one failure", st.Rules)
	}
	var history struct{ Entries []reload.Event }
	get("/v1/rules/history", &history)
	if len(history.Entries) != 2 || !history.Entries[0].Failed() || history.Entries[1].Reason != "initial" || history.Entries[1].Added[0] != "api" {
		t.Errorf("history %+v, want the failure, then the initial rules adding api", history.Entries)
	}
}

// TestAdminTop sends one client past its limit among light ones and reads
// GET /v1/top and /v1/rules: the heavy client tops its rule by
// rejections, the rule's hottest ratio says it pushes past the limit, and
// the metric says so too; a bad query is 400 with the reason.
func TestAdminTop(t *testing.T) {
	a := apptest.StartAdmin(t)
	client, err := rlsclient.Dial(a.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ask := func(key string) {
		t.Helper()
		if _, err := client.Query(t.Context(), rlsclient.Request{Domain: "api",
			Descriptors: [][]descriptor.Entry{{{Key: "api_key", Value: key}}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 { // 2 a minute each: heavy is rejected 8 times
		ask(fmt.Sprintf("light-%d", i))
		if i%2 == 0 {
			ask("heavy")
		}
	}
	get := func(path string, v any) int {
		t.Helper()
		return apptest.GetJSON(t, "http://"+a.AdminAddr+path, apptest.OpsToken, v)
	}
	var topAnswer struct {
		Window, By string
		Instances  int
		Entries    []struct {
			Rule                      string
			Descriptor                []descriptor.Entry
			Requests, Rejected, Error uint64
		}
	}
	if code := get("/v1/top?domain=api&window=1m", &topAnswer); code != http.StatusOK || len(topAnswer.Entries) == 0 {
		t.Fatalf("GET /v1/top: %d, %+v", code, topAnswer)
	}
	first := topAnswer.Entries[0]
	if topAnswer.By != "rejected" || topAnswer.Instances != 1 || first.Descriptor[0].Value != "heavy" || first.Rejected != 8 || first.Requests != 10 {
		t.Errorf("top: %+v, want heavy first with 8 rejected of 10", topAnswer)
	}
	var rules struct {
		Rules []struct {
			Rule, Unit      string
			RequestsPerUnit uint32  `json:"requests_per_unit"`
			Ratio           float64 `json:"hottest_ratio"`
			Hottest         []descriptor.Entry
		}
	}
	if code := get("/v1/rules?domain=api", &rules); code != http.StatusOK || len(rules.Rules) != 1 {
		t.Fatalf("GET /v1/rules: %d, %+v", code, rules)
	}
	if r := rules.Rules[0]; r.Unit != "minute" || r.RequestsPerUnit != 2 || r.Ratio != 5 || r.Hottest[0].Value != "heavy" {
		t.Errorf("rules: %+v, want 2 a minute, the hottest heavy at 5 times the limit", r)
	}
	if m := apptest.Get(t, "http://"+a.HTTPAddr+"/metrics"); !strings.Contains(m, `tollgate_rule_hottest_ratio{domain="api",rule="api_key"} 5`) {
		t.Errorf("/metrics has no hottest ratio of 5 for api_key")
	}
	var bad struct{ Error string }
	if code := get("/v1/top?window=2m", &bad); code != http.StatusBadRequest || !strings.Contains(bad.Error, "domain: required") || !strings.Contains(bad.Error, "window:") {
		t.Errorf("a bad query: %d %q, want 400 naming domain and window", code, bad.Error)
	}
}
