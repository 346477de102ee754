package app_test

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// adminCall calls the admin API of a at path with method and body (none
// if ""), presenting apptest.EnvToken, and returns the answer's status
// and body.
func adminCall(t *testing.T, a *apptest.Running, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+a.AdminAddr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apptest.EnvToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(data)
}

// TestDescriptorValues runs one operator's session against a running
// tollgate with each --descriptor-values: an override of a secret-looking
// API key created, listed, read and deleted through the admin API, a
// refused one, a reset, Envoy's calls, /debug/config and the audit. With
// plain every operator-facing surface shows the key, so each is one that
// carries values; with hash none does, each shows its hash instead, and
// what Envoy is answered (the dynamic metadata, the override's limit) is
// the same.
func TestDescriptorValues(t *testing.T) {
	const secret = "sk-live-4f9c2a7e1b8d"
	hashed := descriptor.ValuesHash.Show(secret)
	for _, view := range []string{"plain", "hash"} {
		t.Run(view, func(t *testing.T) {
			a := apptest.StartAdmin(t, func(s *app.Settings) {
				s.Answers.DynamicMetadata = true
				s.Values.DescriptorValues = view
			})
			var answers []string
			call := func(method, path, body string, wantCode int) string {
				t.Helper()
				code, got := adminCall(t, a.Running, method, path, body)
				if code != wantCode {
					t.Fatalf("%s %s: %d %s, want %d", method, path, code, got, wantCode)
				}
				answers = append(answers, got)
				return got
			}
			key := `[{"key":"api_key","value":"` + secret + `"}]`

			created := call(http.MethodPost, "/v1/overrides", `{"domain":"api","entries":`+key+`,"multiplier":5,"expires_in":"1h"}`, http.StatusCreated)
			o, _ := a.Overrides().List(t.Context(), "api")
			if len(o) != 1 || o[0].Entries[0].Value != secret {
				t.Fatalf("stored overrides %+v, want one of %s as it was given", o, secret)
			}
			id := o[0].ID
			envoy := send(t, dialApp(t, a.Running), "api", descriptor.Entry{Key: "api_key", Value: secret})
			if got := limitName(envoy.Statuses[0]); got != "override:"+id {
				t.Errorf("Envoy is answered the limit %q, want override:%s", got, id)
			}
			if md := protojson.Format(envoy.GetDynamicMetadata()); !strings.Contains(md, "api_key="+secret) {
				t.Errorf("Envoy's dynamic metadata lacks api_key=%s:\n%s", secret, md)
			}
			call(http.MethodGet, "/v1/overrides", "", http.StatusOK)
			call(http.MethodGet, "/v1/overrides/"+id, "", http.StatusOK)
			call(http.MethodPost, "/v1/overrides", `{"domain":"api","entries":[{"key":"tenant","value":"`+secret+`"}],"multiplier":2,"expires_in":"1h"}`, http.StatusBadRequest)
			call(http.MethodPost, "/v1/reset", `{"domain":"api","descriptors":[{"entries":`+key+`}]}`, http.StatusOK)
			debug := apptest.Get(t, "http://"+a.DebugAddr+"/debug/config")
			call(http.MethodDelete, "/v1/overrides/"+id, "", http.StatusOK)
			audited := call(http.MethodGet, "/v1/audit", "", http.StatusOK)
			auditFile, err := os.ReadFile(a.AuditFile)
			if err != nil {
				t.Fatal(err)
			}

			surfaces := map[string]string{
				"the log": a.Logs.String(), "the audit file": string(auditFile), "GET /v1/audit": audited,
				"/debug/config": debug, "the admin answers": strings.Join(answers, ""),
			}
			shown := secret
			if view == "hash" {
				shown = hashed
				for name, text := range surfaces {
					if strings.Contains(text, secret) {
						t.Errorf("%s: %s appears in\n%s", name, secret, text)
					}
				}
			}
			for name, text := range surfaces {
				if !strings.Contains(text, "api_key="+shown) && !strings.Contains(text, `"key":"api_key","value":"`+shown+`"`) {
					t.Errorf("%s: no api_key as %s in\n%s", name, shown, text)
				}
			}
			if want := `"entries":[{"key":"api_key","value":"` + shown + `"}]`; !strings.Contains(created, want) {
				t.Errorf("the created override %s lacks %s", created, want)
			}
		})
	}
}

// TestDescriptorValuesLearned checks, with --descriptor-values hash, the
// log lines and the audit (file and GET /v1/audit) of an instance that
// learns an override from Redis, made on another, and deletes it: they
// show the key's hash, never the key, while the instance applies the
// override to the key.
func TestDescriptorValuesLearned(t *testing.T) {
	const secret = "sk-live-90ac7e11d4b2"
	srv := redistest.StartStandalone(t)
	dir := t.TempDir()
	apptest.WriteFile(t, filepath.Join(dir, "api.yaml"), apptest.AdminRules)
	settings := func(s *app.Settings) {
		s.Store, s.Redis.Addrs, s.Redis.KeyPrefix = "redis", []string{srv.Addr}, "dv"
		s.Redis.Timeout, s.Failure.StoreTimeout = time.Second, 5*time.Second
		s.Admin.Token = apptest.EnvToken
		s.Values.DescriptorValues = "hash"
	}
	logs, bAudit := &logtest.Buffer{}, filepath.Join(t.TempDir(), "audit.jsonl")
	a := apptest.Start(t, dir, apptest.Options{Settings: settings})
	b := apptest.Start(t, dir, apptest.Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), Settings: func(s *app.Settings) {
		settings(s)
		s.Admin.AuditLog = bAudit
	}})
	for _, x := range []*apptest.Running{a, b} {
		polltest.Eventually(t, 5*time.Second, func() bool { return x.FleetListening() }, "the fleet channel is not subscribed")
	}
	code, body := adminCall(t, a, http.MethodPost, "/v1/overrides",
		`{"domain":"api","entries":[{"key":"api_key","value":"`+secret+`"}],"multiplier":5,"expires_in":"1h"}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	list, err := a.Overrides().List(t.Context(), "api")
	if err != nil || len(list) != 1 {
		t.Fatalf("overrides %+v, %v; want one", list, err)
	}
	id, hashed := list[0].ID, descriptor.ValuesHash.Show(secret)
	learned := `msg="override learned from the store" component=overrides id=` + id + ` domain=api entries="api_key=` + hashed + `"`
	polltest.Eventually(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), learned) },
		"the other instance does not log %s", learned)
	if got := limitName(send(t, dialApp(t, b), "api", descriptor.Entry{Key: "api_key", Value: secret}).Statuses[0]); got != "override:"+id {
		t.Errorf("the other instance answers the key with limit %q, want override:%s", got, id)
	}
	if code, body := adminCall(t, b, http.MethodDelete, "/v1/overrides/"+id, ""); code != http.StatusOK {
		t.Fatalf("delete on the other instance: %d %s", code, body)
	}
	if want := `msg="override deleted" component=overrides id=` + id + ` domain=api entries="api_key=` + hashed + `"`; !strings.Contains(logs.String(), want) {
		t.Errorf("the log lacks %s:\n%s", want, logs)
	}
	code, audited := adminCall(t, b, http.MethodGet, "/v1/audit", "")
	if code != http.StatusOK {
		t.Fatalf("audit: %d %s", code, audited)
	}
	auditFile, err := os.ReadFile(bAudit)
	if err != nil {
		t.Fatal(err)
	}
	learnedEntry := `"actor":"store","action":"override.learn","target":"` + id + `","after":{"id":"` + id + `","domain":"api","entries":[{"key":"api_key","value":"` + hashed + `"}]`
	for name, text := range map[string]string{"the log": logs.String(), "GET /v1/audit": audited, "the audit file": string(auditFile)} {
		if strings.Contains(text, secret) {
			t.Errorf("%s: %s appears in\n%s", name, secret, text)
		}
		if name != "the log" && !strings.Contains(text, learnedEntry) {
			t.Errorf("%s: no %s in\n%s", name, learnedEntry, text)
		}
	}
}
