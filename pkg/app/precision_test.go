package app_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// startLogged starts a tollgate on the configuration in dir with settings
// changed by tweak, logging into the returned buffer, and returns it with
// the App; the App stops when the test ends.
func startLogged(t *testing.T, dir string, tweak func(*app.Settings)) (*apptest.Running, *logtest.Buffer) {
	t.Helper()
	logs := &logtest.Buffer{}
	return apptest.Start(t, dir, apptest.Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), Settings: tweak}), logs
}

const (
	cachedRule = "domain: p\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100000, algorithm: fixed_window, precision: cached}\n"
	strictRule = "domain: p\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100000, algorithm: fixed_window}\n"
	memoryNote = "precision cached has no effect with the memory store"
	resetNote  = "descriptor configuration changed: cached counters forgotten, their leases returned"
)

// reloadWith writes yaml as dir's configuration and reloads a.
func reloadWith(t *testing.T, a *apptest.Running, dir, yaml string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Reloader().Reload(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPrecisionOnMemory checks that the memory store says once that
// precision cached changes nothing, whether a rule asks for it at start
// or after a reload, and never when none does; and that /debug/config
// shows the precision.
func TestPrecisionOnMemory(t *testing.T) {
	tests := []struct {
		name      string
		first     string
		flag      string
		reloads   []string
		wantNotes int
	}{
		{"a cached rule at start", cachedRule, "strict", []string{strictRule, cachedRule}, 1},
		{"--precision cached", strictRule, "cached", nil, 1},
		{"a cached rule after a reload", strictRule, "strict", []string{cachedRule, strictRule, cachedRule}, 1},
		{"no cached rule", strictRule, "strict", []string{strictRule + "  - key: other\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(tt.first), 0o600); err != nil {
				t.Fatal(err)
			}
			a, logs := startLogged(t, dir, func(s *app.Settings) { s.Rules.Precision = tt.flag })
			for _, y := range tt.reloads {
				reloadWith(t, a, dir, y)
			}
			if got := strings.Count(logs.String(), memoryNote); got != tt.wantNotes {
				t.Errorf("the log says %q %d times, want %d:\n%s", memoryNote, got, tt.wantNotes, logs)
			}
			debugAddr := a.DebugAddr
			body := apptest.Get(t, "http://"+debugAddr+"/debug/config")
			if cached := strings.Contains(body, "precision cached"); cached != (a.Reloader().Current().Cached()) {
				t.Errorf("/debug/config names precision cached: %v, want %v:\n%s", cached, !cached, body)
			}
		})
	}
}

// TestReloadReturnsLeases checks that a reload that changes the
// configuration makes the cached store forget its counters (their leases
// returned), and that one that changes nothing keeps them.
func TestReloadReturnsLeases(t *testing.T) {
	srv := redistest.StartStandalone(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(cachedRule), 0o600); err != nil {
		t.Fatal(err)
	}
	a, logs := startLogged(t, dir, func(s *app.Settings) { s.Store, s.Redis.Addrs = "redis", []string{srv.Addr} })
	grpcAddr := a.Addrs().GRPC
	client, err := rlsclient.Dial(grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// hit decides k=v, so that its counter is held (not idle) right after.
	hit := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := client.Query(ctx, rlsclient.Request{Domain: "p", Descriptors: [][]descriptor.Entry{{{Key: "k", Value: "v"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	hit()
	if n := a.CachedLen(); n != 1 {
		t.Fatalf("the cached store holds %d counters after a cached hit, want 1", n)
	}
	hit()
	reloadWith(t, a, dir, cachedRule) // unchanged
	if n := a.CachedLen(); n != 1 || strings.Contains(logs.String(), resetNote) {
		t.Fatalf("after an unchanged reload the cached store holds %d counters, want 1; log:\n%s", n, logs)
	}
	hit()
	reloadWith(t, a, dir, strings.Replace(cachedRule, "100000", "50000", 1))
	if n := a.CachedLen(); n != 0 {
		t.Errorf("after a changed reload the cached store holds %d counters, want 0", n)
	}
	if want := resetNote + `" counters=1`; !strings.Contains(logs.String(), want) {
		t.Errorf("the log lacks %q:\n%s", want, logs)
	}
}
