package app_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/pkg/app"
)

// TestAuditLogRotation moves the audit log away, as a log rotation does,
// and checks that the next entry goes to a new file at its path, and that
// /metrics counts no failed write.
func TestAuditLogRotation(t *testing.T) {
	dir, auditPath := t.TempDir(), filepath.Join(t.TempDir(), "audit.jsonl")
	apptest.WriteFile(t, filepath.Join(dir, "api.yaml"), apptest.AdminRules)
	a := apptest.Start(t, dir, apptest.Options{Settings: func(s *app.Settings) { s.Admin.AuditLog = auditPath }})
	if err := os.Rename(auditPath, auditPath+".1"); err != nil {
		t.Fatal(err)
	}
	apptest.WriteFile(t, filepath.Join(dir, "web.yaml"), "domain: web\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := a.Reloader().Reload(ctx); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, 5*time.Second, func() bool {
		data, err := os.ReadFile(auditPath)
		return err == nil && strings.Contains(string(data), `"action":"reload"`)
	}, "the reload's audit entry did not reach a new file at the audit log's path")
	if body := apptest.Get(t, "http://"+a.HTTPAddr+"/metrics"); !strings.Contains(body, "\ntollgate_audit_write_failures_total 0\n") {
		t.Errorf("/metrics does not count 0 failed audit writes:\n%s", body)
	}
}
