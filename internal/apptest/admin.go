package apptest

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/pkg/app"
)

const (
	// AdminRules are the rules StartAdmin serves: 2 a minute per api_key,
	// in a fixed window.
	AdminRules = `domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
`
	// OpsToken is the admin token StartAdmin's token file gives "ops".
	OpsToken = "ops-token-0b6e9d2c"
	// EnvToken is StartAdmin's TOLLGATE_ADMIN_TOKEN.
	EnvToken = "env-token-7d41a8f3"
)

// Admin is a running tollgate with the admin API on.
type Admin struct {
	*Running
	// Dir holds the rules (AdminRules in api.yaml), TokenFile the admin
	// tokens, AuditFile the audit log.
	Dir, TokenFile, AuditFile string
	// Logs holds what the App logged.
	Logs *logtest.Buffer
}

// StartAdmin runs a tollgate serving AdminRules with the admin API on, by
// OpsToken from a token file and EnvToken from the environment, until the
// test ends. Each of more, in order, then changes the settings.
func StartAdmin(t testing.TB, more ...func(*app.Settings)) *Admin {
	t.Helper()
	a := &Admin{Dir: t.TempDir(), Logs: &logtest.Buffer{}}
	a.TokenFile = filepath.Join(t.TempDir(), "tokens")
	a.AuditFile = filepath.Join(t.TempDir(), "audit.jsonl")
	WriteFile(t, filepath.Join(a.Dir, "api.yaml"), AdminRules)
	WriteFile(t, a.TokenFile, "# admins\nops "+OpsToken+"\n")
	a.Running = Start(t, a.Dir, Options{
		Logger: slog.New(slog.NewTextHandler(a.Logs, nil)),
		Settings: func(s *app.Settings) {
			s.Admin.TokenFile, s.Admin.Token, s.Admin.AuditLog = a.TokenFile, EnvToken, a.AuditFile
			for _, change := range more {
				change(s)
			}
		},
	})
	return a
}

// WriteFile writes content to path, or fails the test.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Get returns the body of a GET of url, or fails the test unless it is
// 200 OK.
func Get(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
	return string(body)
}

// Status calls url with method, presenting token unless it is empty, and
// returns the answer's status code.
func Status(t testing.TB, method, url, token string) int {
	t.Helper()
	return Send(t, method, url, token, "")
}

// Send calls url with method and body (none if empty), presenting token
// unless it is empty, and returns the answer's status code.
func Send(t testing.TB, method, url, token, body string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
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

// GetJSON gets url presenting token, decodes its JSON answer into v and
// returns the status code; a call or an answer that fails fails the test.
func GetJSON(t testing.TB, url, token string, v any) int {
	t.Helper()
	return SendJSON(t, http.MethodGet, url, token, "", v)
}

// SendJSON calls url with method and body (none if empty) presenting
// token, decodes its JSON answer into v and returns the status code; a
// call or an answer that fails fails the test.
func SendJSON(t testing.TB, method, url, token, body string, v any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s %s: %s: %v", method, url, resp.Status, err)
	}
	return resp.StatusCode
}
