package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/polltest"
)

// TestAdminTokenRotation edits the running tollgate's token file and
// checks that the new token works and the removed one stops working.
func TestAdminTokenRotation(t *testing.T) {
	a := apptest.StartAdmin(t)
	url := "http://" + a.HTTPAddr + "/v1/audit"
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
