package app

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/pkg/override"
)

const (
	adminRules = `domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
`
	// The tokens of the tests: ops's from the file, the environment's.
	opsToken = "ops-token-0b6e9d2c"
	envToken = "env-token-7d41a8f3"
)

// adminApp is a running tollgate with the admin API on.
type adminApp struct {
	app                             *App
	dir, tokenFile, auditFile, addr string
	logs                            *logtest.Buffer
}

func startAdminApp(t *testing.T) *adminApp {
	t.Helper()
	a := &adminApp{dir: t.TempDir()}
	a.tokenFile = filepath.Join(t.TempDir(), "tokens")
	a.auditFile = filepath.Join(t.TempDir(), "audit.jsonl")
	writeTestFile(t, filepath.Join(a.dir, "api.yaml"), adminRules)
	writeTestFile(t, a.tokenFile, "# admins\nops "+opsToken+"\n")
	a.app, a.logs = startLogged(t, a.dir, func(s *Settings) {
		s.AdminTokenFile, s.AdminToken, s.AuditLog = a.tokenFile, envToken, a.auditFile
	})
	_, httpAddr, _ := a.app.Addrs()
	a.addr = httpAddr
	return a
}

// writeTestFile writes content to path, or fails the test.
func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// admin runs `tollgate admin args...` against a, with env as the
// environment, and returns its exit code, stdout and stderr.
func (a *adminApp) admin(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	args = append([]string{"admin", "--addr", a.addr}, args...)
	return runEnv(t.Context(), env, args...)
}

// httpStatus calls the HTTP API with token and returns the status.
func httpStatus(t *testing.T, method, url, token string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// postCheck posts body to /v1/check and fails the test unless it is
// allowed.
func postCheck(t *testing.T, addr, body string) {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("check %s: %s", body, resp.Status)
	}
}

// TestAdminOffWithoutToken checks that without an admin token the admin
// paths are not served, and the CLI says so.
func TestAdminOffWithoutToken(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "api.yaml"), adminRules)
	r := serveTest(t, dir, nil)
	for _, path := range []string{"/v1/overrides", "/v1/audit", "/v1/overrides/x"} {
		if got := httpStatus(t, http.MethodGet, "http://"+r.httpAddr+path, opsToken); got != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, got)
		}
	}
	code, _, errOut := runEnv(t.Context(), map[string]string{"TOLLGATE_ADMIN_TOKEN": opsToken},
		"admin", "--addr", r.httpAddr, "overrides", "list")
	if want := "tollgate admin overrides list: " + r.httpAddr + ": the admin API is not enabled there (no admin token is configured)\n"; code != 1 || errOut != want {
		t.Errorf("exit %d, stderr %q; want 1, %q", code, errOut, want)
	}
}

// TestAdminCommands drives a running tollgate through `tollgate admin`:
// an override's whole life, remaining, reset and the audit.
func TestAdminCommands(t *testing.T) {
	a := startAdminApp(t)
	withFile := []string{"--token-file", a.tokenFile}
	env := map[string]string{"TOLLGATE_ADMIN_TOKEN": envToken}
	remaining := func(key string) string {
		t.Helper()
		code, out, errOut := a.admin(t, env, "remaining", "--domain", "api", "--descriptor", "api_key="+key)
		if code != 0 {
			t.Fatalf("remaining: exit %d: %s", code, errOut)
		}
		var resp struct {
			Statuses []struct {
				Limit     struct{ Name string }
				Remaining int
			}
		}
		if err := json.Unmarshal([]byte(out), &resp); err != nil || len(resp.Statuses) != 1 {
			t.Fatalf("remaining printed %q: %v", out, err)
		}
		st := resp.Statuses[0]
		return st.Limit.Name + " " + strconv.Itoa(st.Remaining)
	}

	code, out, errOut := a.admin(t, nil, append(withFile, "overrides", "create", "--domain", "api", "--descriptor", "api_key=k1",
		"--multiplier", "5", "--expires-in", "1h", "--reason", "launch")...)
	if code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	var created override.Override
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.ID == "" || created.CreatedBy != "ops" || created.Multiplier != 5 {
		t.Fatalf("create printed %q (%v), want the override created by ops", out, err)
	}
	if !strings.HasPrefix(out, "{\n  \"id\": ") {
		t.Errorf("create printed %q, want indented JSON", out)
	}
	if got, want := remaining("k1"), "override:"+created.ID+" 10"; got != want {
		t.Errorf("remaining under the override: %q, want %q", got, want)
	}

	for _, args := range [][]string{{"overrides", "list"}, {"overrides", "list", "--domain", "api"}, {"overrides", "get", created.ID}} {
		code, out, errOut := a.admin(t, env, args...)
		if code != 0 || !strings.Contains(out, `"id": "`+created.ID+`"`) {
			t.Errorf("%v: exit %d, %q %q; want the override", args, code, out, errOut)
		}
	}
	if code, out, _ := a.admin(t, env, "overrides", "list", "--domain", "web"); code != 0 || out != "{\n  \"overrides\": []\n}\n" {
		t.Errorf("list of another domain: exit %d, %q", code, out)
	}

	// A client exhausted, then reset. Not a wait for something: the
	// minute's fixed window must not end between the hits and the reset.
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 5*time.Second {
		time.Sleep(left)
	}
	for range 2 {
		postCheck(t, a.addr, `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k2"}]}]}`)
	}
	if got := remaining("k1"); got != "override:"+created.ID+" 10" {
		t.Errorf("k1 touched by k2's hits: %q", got)
	}
	if got := remaining("k2"); got != " 0" {
		t.Fatalf("remaining of k2 after its 2 hits: %q, want the rule's 0", got)
	}
	code, out, errOut = a.admin(t, env, "reset", "--domain", "api", "--descriptor", "api_key=k2", "--reason", "incident")
	if code != 0 || !strings.Contains(out, `"rule": "api_key"`) {
		t.Errorf("reset: exit %d, %q %q", code, out, errOut)
	}
	if got := remaining("k2"); got != " 2" {
		t.Errorf("remaining of k2 after the reset: %q, want the rule's 2", got)
	}

	code, out, errOut = a.admin(t, env, "overrides", "delete", created.ID, "--reason", "done")
	if code != 0 || !strings.Contains(out, created.ID) {
		t.Errorf("delete: exit %d, %q %q", code, out, errOut)
	}
	if got := remaining("k1"); got != " 2" {
		t.Errorf("remaining after the delete: %q, want the rule's 2", got)
	}

	code, out, errOut = a.admin(t, env, "audit", "--limit", "10")
	if code != 0 {
		t.Fatalf("audit: exit %d: %s", code, errOut)
	}
	var audit struct {
		Entries []struct{ Actor, Action, Reason string }
	}
	if err := json.Unmarshal([]byte(out), &audit); err != nil {
		t.Fatalf("audit printed %q: %v", out, err)
	}
	type row struct{ Actor, Action, Reason string }
	var got []row
	for _, e := range audit.Entries {
		got = append(got, row(e))
	}
	want := []row{{"ops", "override.create", "launch"}, {"env", "reset", "incident"}, {"env", "override.delete", "done"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("audit %+v, want %+v", got, want)
	}

	// Failures, each with a clear message and its exit code.
	for _, tc := range []struct {
		name     string
		env      map[string]string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no token", nil, []string{"overrides", "list"}, 2,
			"tollgate admin overrides list: usage: no admin token: give --token-file or set TOLLGATE_ADMIN_TOKEN\n"},
		{"wrong token", map[string]string{"TOLLGATE_ADMIN_TOKEN": "nope"}, []string{"overrides", "list"}, 1,
			"tollgate admin overrides list: GET /v1/overrides: the admin token was refused\n"},
		{"unknown id", env, []string{"overrides", "get", "nope"}, 1,
			"tollgate admin overrides get: 404 Not Found: override \"nope\": override not found\n"},
		{"refused override", env, []string{"overrides", "create", "--domain", "web", "--descriptor", "a=b", "--multiplier", "2", "--expires-in", "1h"}, 1,
			"tollgate admin overrides create: 400 Bad Request: invalid override: unknown domain \"web\"\n"},
		{"limit and multiplier", env, []string{"overrides", "create", "--domain", "api", "--descriptor", "a=b", "--limit", "5/minute", "--multiplier", "2", "--expires-in", "1h"}, 2,
			"tollgate admin overrides create: usage: give one of --limit and --multiplier\n"},
		{"bad limit", env, []string{"overrides", "create", "--domain", "api", "--descriptor", "a=b", "--limit", "5", "--expires-in", "1h"}, 2,
			"tollgate admin overrides create: usage: --limit: want N/UNIT such as 5000/minute, got \"5\"\n"},
		{"no expiry", env, []string{"overrides", "create", "--domain", "api", "--descriptor", "a=b", "--multiplier", "2"}, 2,
			"tollgate admin overrides create: usage: give one of --expires-in and --expires-at\n"},
		{"no id", env, []string{"overrides", "delete"}, 2,
			"tollgate admin overrides delete: usage: want one override ID, got 0 arguments\n"},
		{"no descriptor", env, []string{"reset", "--domain", "api"}, 2,
			"tollgate admin reset: usage: --domain and at least one --descriptor are required\n"},
		{"unknown command", env, []string{"overrides", "rename"}, 2,
			"tollgate admin overrides: usage: unknown command \"rename\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := a.admin(t, tc.env, tc.args...)
			if code != tc.wantCode || errOut != tc.wantErr || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q", code, out, errOut, tc.wantCode, tc.wantErr)
			}
		})
	}
}

// TestAdminTokenRotation edits the running tollgate's token file and
// checks that the new token works and the removed one stops working.
func TestAdminTokenRotation(t *testing.T) {
	a := startAdminApp(t)
	url := "http://" + a.addr + "/v1/audit"
	if got := httpStatus(t, http.MethodGet, url, opsToken); got != http.StatusOK {
		t.Fatalf("the file's token: %d", got)
	}
	writeTestFile(t, a.tokenFile, "ops2 rotated-token-5c1f\n")
	polltest.Eventually(t, 5*time.Second, func() bool { return httpStatus(t, http.MethodGet, url, "rotated-token-5c1f") == http.StatusOK },
		"the new token to be accepted")
	if got := httpStatus(t, http.MethodGet, url, opsToken); got != http.StatusUnauthorized {
		t.Errorf("the removed token: %d, want 401", got)
	}
	if got := httpStatus(t, http.MethodGet, url, envToken); got != http.StatusOK {
		t.Errorf("the environment's token after the rotation: %d, want 200", got)
	}
}

// TestAdminTokensStayOut uses the tokens, right and wrong, and checks
// that none reaches the logs, the audit log, /debug/config or /metrics.
func TestAdminTokensStayOut(t *testing.T) {
	a := startAdminApp(t)
	const wrong = "wrong-token-91c3e0"
	for _, tok := range []string{opsToken, envToken, wrong} {
		env := map[string]string{"TOLLGATE_ADMIN_TOKEN": tok}
		a.admin(t, env, "overrides", "create", "--domain", "api", "--descriptor", "api_key=k1", "--multiplier", "2", "--expires-in", "1h")
		a.admin(t, env, "reset", "--domain", "api", "--descriptor", "api_key=k1")
		a.admin(t, env, "audit")
	}
	_, httpAddr, debugAddr := a.app.Addrs()
	auditLog, err := os.ReadFile(a.auditFile)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{
		"logs":          a.logs.String(),
		"audit log":     string(auditLog),
		"/debug/config": httpGet(t, "http://"+debugAddr+"/debug/config"),
		"/metrics":      httpGet(t, "http://"+httpAddr+"/metrics"),
	}
	if !strings.Contains(seen["logs"], "unknown token refused") || !strings.Contains(seen["audit log"], `"actor":"ops"`) {
		t.Fatalf("the calls were not logged and audited:\n%s\n%s", seen["logs"], seen["audit log"])
	}
	for where, text := range seen {
		for _, tok := range []string{opsToken, envToken, wrong} {
			if strings.Contains(text, tok) {
				t.Errorf("%s shows the token %q", where, tok)
			}
		}
	}
}

// TestReloadAudited changes the rules of a running tollgate and checks the
// audit log's line for it.
func TestReloadAudited(t *testing.T) {
	a := startAdminApp(t)
	before := a.app.reloader.Status().Hash
	writeTestFile(t, filepath.Join(a.dir, "web.yaml"), "domain: web\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	writeTestFile(t, filepath.Join(a.dir, "api.yaml"), strings.Replace(adminRules, "requests_per_unit: 2", "requests_per_unit: 3", 1))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := a.app.reloader.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	after := a.app.reloader.Status().Hash
	data, err := os.ReadFile(a.auditFile)
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
	if line.Actor != "reload" || line.Action != "reload" || line.Target != a.dir ||
		!reflect.DeepEqual(line.Before, map[string]any{"hash": before}) ||
		!reflect.DeepEqual(line.After, map[string]any{"hash": after, "added": []any{"web"}, "changed": []any{"api"}}) {
		t.Errorf("audit log line %s\nwant a reload from %s to %s adding web, changing api", data, before, after)
	}
}

func TestDiffDomains(t *testing.T) {
	// Covered end to end by TestReloadAudited; here the removal.
	a := startAdminApp(t)
	old := a.app.reloader.Current()
	if err := os.Remove(filepath.Join(a.dir, "api.yaml")); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(a.dir, "web.yaml"), "domain: web\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := a.app.reloader.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	added, removed, changed := diffDomains(old, a.app.reloader.Current())
	if !reflect.DeepEqual(added, []string{"web"}) || !reflect.DeepEqual(removed, []string{"api"}) || changed != nil {
		t.Errorf("added %v, removed %v, changed %v; want [web] [api] []", added, removed, changed)
	}
}
