package cli

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/tlsfiles/tlsfilestest"
)

// runAdmin runs `tollgate admin args...` against a, with env as the
// environment, and returns its exit code, stdout and stderr.
func runAdmin(t *testing.T, a *apptest.Admin, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	args = append([]string{"admin", "--addr", a.AdminAddr}, args...)
	return runEnv(t.Context(), env, args...)
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
// paths are not served and no admin listener opens, and that the CLI says
// where the admin API is when it finds none.
func TestAdminOffWithoutToken(t *testing.T) {
	dir := t.TempDir()
	apptest.WriteFile(t, filepath.Join(dir, "api.yaml"), apptest.AdminRules)
	r := apptest.Start(t, dir, apptest.Options{})
	for _, path := range []string{"/v1/overrides", "/v1/audit", "/v1/overrides/x"} {
		if got := apptest.Status(t, http.MethodGet, "http://"+r.HTTPAddr+path, apptest.OpsToken); got != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, got)
		}
	}
	const hint = "no admin API there: tollgate serves it on its --admin-addr (127.0.0.1:8082 by default), and only when an admin token is configured\n"
	env := map[string]string{"TOLLGATE_ADMIN_TOKEN": apptest.OpsToken}
	code, _, errOut := runEnv(t.Context(), env, "admin", "--addr", r.HTTPAddr, "overrides", "list")
	if want := "tollgate admin overrides list: " + r.HTTPAddr + ": " + hint; code != 1 || errOut != want {
		t.Errorf("the public listener: exit %d, stderr %q; want 1, %q", code, errOut, want)
	}
	closed := closedPort(t)
	code, _, errOut = runEnv(t.Context(), env, "admin", "--addr", closed, "audit")
	if code != 1 || !strings.Contains(errOut, "connection refused: "+hint) {
		t.Errorf("a closed port: exit %d, stderr %q; want 1, connection refused and %q", code, errOut, hint)
	}
}

// TestAdminOverTLS serves the admin API over mutual TLS and calls it with
// the CLI's --tls-* flags: with the client certificate it answers, without
// it or in plaintext it does not.
func TestAdminOverTLS(t *testing.T) {
	m := tlsfilestest.NewMutual(t, t.TempDir(), "tollgate.test")
	clientCert, clientKey := m.ClientFiles(t, "ops.test")
	a := apptest.StartAdmin(t, func(s *app.Settings) {
		s.AdminTLS.Cert, s.AdminTLS.Key, s.AdminTLS.ClientCA, s.AdminTLS.ClientSAN = m.CertFile, m.KeyFile, m.ClientCAFile, "ops.test"
	})
	env := map[string]string{"TOLLGATE_ADMIN_TOKEN": apptest.OpsToken}
	server := []string{"--tls-ca", m.CAFile, "--tls-server-name", "tollgate.test"}
	for _, c := range []struct {
		name    string
		flags   []string
		wantErr string // "" for success
	}{
		{"mutual", append([]string{"--tls-cert", clientCert, "--tls-key", clientKey}, server...), ""},
		{"no client certificate", server, "certificate required"},
		{"plaintext", nil, "an HTTP request to an HTTPS server"},
	} {
		args := append(append([]string{"admin", "--addr", a.AdminAddr}, c.flags...), "audit", "--limit", "1")
		code, _, errOut := runEnv(t.Context(), env, args...)
		switch {
		case c.wantErr == "" && code != 0:
			t.Errorf("%s: exit %d: %s", c.name, code, errOut)
		case c.wantErr != "" && (code != 1 || !strings.Contains(errOut, c.wantErr)):
			t.Errorf("%s: exit %d, stderr %q; want 1 and %q", c.name, code, errOut, c.wantErr)
		}
	}
}

// TestAdminCommands drives a running tollgate through `tollgate admin`:
// an override's whole life, remaining, reset and the audit.
func TestAdminCommands(t *testing.T) {
	a := apptest.StartAdmin(t)
	withFile := []string{"--token-file", a.TokenFile}
	env := map[string]string{"TOLLGATE_ADMIN_TOKEN": apptest.EnvToken}
	remaining := func(key string) string {
		t.Helper()
		code, out, errOut := runAdmin(t, a, env, "remaining", "--domain", "api", "--descriptor", "api_key="+key)
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

	code, out, errOut := runAdmin(t, a, nil, append(withFile, "overrides", "create", "--domain", "api", "--descriptor", "api_key=k1",
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
		code, out, errOut := runAdmin(t, a, env, args...)
		if code != 0 || !strings.Contains(out, `"id": "`+created.ID+`"`) {
			t.Errorf("%v: exit %d, %q %q; want the override", args, code, out, errOut)
		}
	}
	if code, out, _ := runAdmin(t, a, env, "overrides", "list", "--domain", "web"); code != 0 || out != "{\n  \"overrides\": []\n}\n" {
		t.Errorf("list of another domain: exit %d, %q", code, out)
	}

	// A client exhausted, then reset. Not a wait for something: the
	// minute's fixed window must not end between the hits and the reset.
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 5*time.Second {
		time.Sleep(left)
	}
	for range 2 {
		postCheck(t, a.HTTPAddr, `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k2"}]}]}`)
	}
	if got := remaining("k1"); got != "override:"+created.ID+" 10" {
		t.Errorf("k1 touched by k2's hits: %q", got)
	}
	if got := remaining("k2"); got != " 0" {
		t.Fatalf("remaining of k2 after its 2 hits: %q, want the rule's 0", got)
	}
	code, out, errOut = runAdmin(t, a, env, "reset", "--domain", "api", "--descriptor", "api_key=k2", "--reason", "incident")
	if code != 0 || !strings.Contains(out, `"rule": "api_key"`) {
		t.Errorf("reset: exit %d, %q %q", code, out, errOut)
	}
	if got := remaining("k2"); got != " 2" {
		t.Errorf("remaining of k2 after the reset: %q, want the rule's 2", got)
	}

	code, out, errOut = runAdmin(t, a, env, "overrides", "delete", created.ID, "--reason", "done")
	if code != 0 || !strings.Contains(out, created.ID) {
		t.Errorf("delete: exit %d, %q %q", code, out, errOut)
	}
	if got := remaining("k1"); got != " 2" {
		t.Errorf("remaining after the delete: %q, want the rule's 2", got)
	}

	code, out, errOut = runAdmin(t, a, env, "audit", "--limit", "10")
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
			code, out, errOut := runAdmin(t, a, tc.env, tc.args...)
			if code != tc.wantCode || errOut != tc.wantErr || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q", code, out, errOut, tc.wantCode, tc.wantErr)
			}
		})
	}
}

// TestAdminTokensStayOut uses the tokens, right and wrong, and checks
// that none reaches the logs, the audit log, /debug/config or /metrics.
func TestAdminTokensStayOut(t *testing.T) {
	a := apptest.StartAdmin(t)
	const wrong = "wrong-token-91c3e0"
	for _, tok := range []string{apptest.OpsToken, apptest.EnvToken, wrong} {
		env := map[string]string{"TOLLGATE_ADMIN_TOKEN": tok}
		runAdmin(t, a, env, "overrides", "create", "--domain", "api", "--descriptor", "api_key=k1", "--multiplier", "2", "--expires-in", "1h")
		runAdmin(t, a, env, "reset", "--domain", "api", "--descriptor", "api_key=k1")
		runAdmin(t, a, env, "audit")
	}
	auditLog, err := os.ReadFile(a.AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{
		"logs":          a.Logs.String(),
		"audit log":     string(auditLog),
		"/debug/config": apptest.Get(t, "http://"+a.DebugAddr+"/debug/config"),
		"/metrics":      apptest.Get(t, "http://"+a.HTTPAddr+"/metrics"),
	}
	if !strings.Contains(seen["logs"], "unknown token refused") || !strings.Contains(seen["audit log"], `"actor":"ops"`) {
		t.Fatalf("the calls were not logged and audited:\n%s\n%s", seen["logs"], seen["audit log"])
	}
	for where, text := range seen {
		for _, tok := range []string{apptest.OpsToken, apptest.EnvToken, wrong} {
			if strings.Contains(text, tok) {
				t.Errorf("%s shows the token %q", where, tok)
			}
		}
	}
}
