package reload_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/reload"
	"github.com/tollgatehq/tollgate/pkg/telemetry"
)

// wait bounds every poll in this file. Reloads take milliseconds;
// the margin is for a busy machine.
const wait = 5 * time.Second

// fakeLoader stands in for descriptor.Load. It reads the YAML files that
// descriptor.Load would read and records what it saw, so tests can tell
// which content a reload picked up. A file containing "broken" fails the
// load with an error naming it.
type fakeLoader struct {
	mu    sync.Mutex
	calls int
	seen  string
}

func (f *fakeLoader) load(dir string) (*descriptor.Tree, error) {
	var parts []string
	var errs []error
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if path != dir && strings.HasPrefix(name, ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || (!strings.HasSuffix(name, ".yaml") && !strings.HasSuffix(name, ".yml")) {
			return nil
		}
		data, err := os.ReadFile(path) // follows Kubernetes' symlinks
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		content := strings.TrimSpace(string(data))
		parts = append(parts, rel+"="+content)
		if strings.Contains(content, "broken") {
			errs = append(errs, fmt.Errorf("%s:1: descriptors[0]: broken value", rel))
		}
		return nil
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.seen = strings.Join(parts, ";")
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &descriptor.Tree{}, nil
}

func (f *fakeLoader) saw() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen
}

func (f *fakeLoader) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newFake returns a Reloader over dir with a fake loader and a short
// debounce.
func newFake(t *testing.T, dir string) (*reload.Reloader, *fakeLoader) {
	t.Helper()
	f := &fakeLoader{}
	r, err := reload.New(reload.Options{Dir: dir, Load: f.load, Debounce: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r, f
}

// start runs r until the test ends and waits until Run has set up its
// watch, which it marks with one reload of its own (the second load after
// New's). Cleanup stops Run and checks that it returned nil.
func start(t *testing.T, r *reload.Reloader) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(wait):
			t.Error("Run did not return after cancel")
		}
	})
	polltest.Eventually(t, wait, func() bool {
		st := r.Status()
		return st.Reloads+st.Failures >= 2
	}, "Run did not start")
}

func TestNewFailsOnBrokenConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "x.yaml"), "broken")
	f := &fakeLoader{}
	r, err := reload.New(reload.Options{Dir: dir, Load: f.load})
	if err == nil {
		t.Fatalf("New = %v, nil; want an error", r)
	}
	if !strings.Contains(err.Error(), "x.yaml:1: descriptors[0]: broken value") {
		t.Errorf("New error = %q, want it to name x.yaml:1", err)
	}
}

// TestStartBroken checks a Reloader of another rule set that may start
// broken: New succeeds with no tree, the failure is logged under the
// set's component and counted in the set's metrics, and a fixed file is
// picked up by the watch.
func TestStartBroken(t *testing.T) {
	t.Parallel()
	tel, err := telemetry.Setup(t.Context(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	dir := t.TempDir()
	write(t, filepath.Join(dir, "x.yaml"), "broken")
	logs := &logtest.Buffer{}
	f := &fakeLoader{}
	r, err := reload.New(reload.Options{
		Dir: dir, Load: f.load, Debounce: 20 * time.Millisecond, Set: "shadow", StartBroken: true,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)), MeterProvider: tel.MeterProvider(),
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if r.Current() != nil {
		t.Fatal("Current() is a tree after a broken first load")
	}
	if st := r.Status(); st.Failures != 1 || st.Reloads != 0 || st.LastError == nil {
		t.Fatalf("Status() = %+v, want one failure", st)
	}
	recs := records(t, logs)
	if len(recs) != 1 || recs[0]["level"] != "ERROR" || recs[0]["component"] != "shadow" ||
		recs[0]["msg"] != "descriptor configuration rejected; no tree loaded yet" {
		t.Fatalf("logs = %v, want one error of component shadow", recs)
	}
	body := scrape(t, tel)
	for _, want := range []string{
		`tollgate_shadow_config_reloads_total\{[^}]*result="failure"[^}]*\} 1`,
		`tollgate_shadow_config_last_reload_successful 0`,
	} {
		if !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(body) {
			t.Errorf("scrape has no line matching %s; got:\n%s", want, grep(body, "tollgate_"))
		}
	}
	if strings.Contains(body, "tollgate_config_") {
		t.Errorf("the shadow set's metrics are named as the live rules':\n%s", grep(body, "tollgate_config_"))
	}

	start(t, r)
	write(t, filepath.Join(dir, "x.yaml"), "fixed")
	polltest.Eventually(t, wait, func() bool { return r.Current() != nil }, "the fixed file was not loaded")
	if got := f.saw(); got != "x.yaml=fixed" {
		t.Errorf("loader saw %q, want x.yaml=fixed", got)
	}
}

func TestNewLoadsInitialTree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "x.yaml"), "v1")
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f := &fakeLoader{}
	r, err := reload.New(reload.Options{Dir: dir, Load: f.load, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if r.Current() == nil {
		t.Fatal("Current() = nil after New")
	}
	if got := f.saw(); got != "x.yaml=v1" {
		t.Errorf("loader saw %q, want x.yaml=v1", got)
	}
	st := r.Status()
	if st.Reloads != 1 || st.Failures != 0 || st.LastError != nil || !st.LastSuccess.Equal(now) {
		t.Errorf("Status() = %+v, want 1 reload at %v and no error", st, now)
	}
}

func TestEditReloads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "x.yaml"), "v1")
	r, f := newFake(t, dir)
	start(t, r)

	write(t, filepath.Join(dir, "x.yaml"), "v2")
	polltest.Eventually(t, wait, func() bool { return f.saw() == "x.yaml=v2" }, "edit not reloaded; loader saw %q", f.saw())
	if st := r.Status(); st.LastError != nil || st.Failures != 0 {
		t.Errorf("Status() = %+v, want no failure", st)
	}
}

func TestNewFileReloads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "a")
	r, f := newFake(t, dir)
	start(t, r)

	write(t, filepath.Join(dir, "b.yml"), "b")
	polltest.Eventually(t, wait, func() bool { return f.saw() == "a.yaml=a;b.yml=b" }, "new file not loaded; loader saw %q", f.saw())

	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, wait, func() bool { return f.saw() == "b.yml=b" }, "removal not reloaded; loader saw %q", f.saw())
}

func TestBrokenEditKeepsPreviousTree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "x.yaml"), "v1")
	r, f := newFake(t, dir)
	start(t, r)
	before := r.Status()
	tree := r.Current()

	write(t, filepath.Join(dir, "x.yaml"), "broken")
	polltest.Eventually(t, wait, func() bool { return r.Status().Failures == before.Failures+1 }, "broken edit not counted")
	st := r.Status()
	if st.LastError == nil || !strings.Contains(st.LastError.Error(), "x.yaml:1: descriptors[0]: broken value") {
		t.Errorf("Status().LastError = %v, want the loader's error", st.LastError)
	}
	if r.Current() != tree || st.Hash != before.Hash || !st.LastSuccess.Equal(before.LastSuccess) {
		t.Error("a broken edit replaced the live tree or its status")
	}

	write(t, filepath.Join(dir, "x.yaml"), "v2")
	polltest.Eventually(t, wait, func() bool { return f.saw() == "x.yaml=v2" && r.Status().LastError == nil },
		"fixed edit not reloaded; loader saw %q, status %+v", f.saw(), r.Status())
}

// TestEditorRenameSave saves the way vim, VS Code and most tools do: write
// a temporary file and rename it over the original. A watch on the old
// file would be left on a deleted inode.
func TestEditorRenameSave(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "x.yaml"), "v1")
	r, f := newFake(t, dir)
	start(t, r)

	for _, v := range []string{"v2", "v3"} {
		tmp := filepath.Join(dir, ".x.yaml.swp")
		write(t, tmp, v)
		if err := os.Rename(tmp, filepath.Join(dir, "x.yaml")); err != nil {
			t.Fatal(err)
		}
		polltest.Eventually(t, wait, func() bool { return f.saw() == "x.yaml="+v }, "rename-save of %s not reloaded; loader saw %q", v, f.saw())
	}
}

// TestKubernetesSymlinkSwap updates the directory as the kubelet updates a
// mounted ConfigMap: the files live in a timestamped hidden directory,
// "..data" links to it, the visible names link through "..data", and an
// update renames a new "..data" link over the old one.
func TestKubernetesSymlinkSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "..2026_a", "x.yaml"), "v1")
	symlink(t, "..2026_a", filepath.Join(dir, "..data"))
	symlink(t, filepath.Join("..data", "x.yaml"), filepath.Join(dir, "x.yaml"))
	r, f := newFake(t, dir)
	if got := f.saw(); got != "x.yaml=v1" {
		t.Fatalf("initial load saw %q", got)
	}
	start(t, r)

	for _, step := range []struct{ dir, content string }{{"..2026_b", "v2"}, {"..2026_c", "v3"}} {
		write(t, filepath.Join(dir, step.dir, "x.yaml"), step.content)
		symlink(t, step.dir, filepath.Join(dir, "..data_tmp"))
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		polltest.Eventually(t, wait, func() bool { return f.saw() == "x.yaml="+step.content },
			"..data swap to %s not reloaded; loader saw %q", step.dir, f.saw())
	}
}

func symlink(t *testing.T, target, name string) {
	t.Helper()
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}

func TestSubdirectories(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "old", "a.yaml"), "a1")
	r, f := newFake(t, dir)
	start(t, r)

	// A subdirectory present at start is watched.
	write(t, filepath.Join(dir, "old", "a.yaml"), "a2")
	polltest.Eventually(t, wait, func() bool { return f.saw() == "old/a.yaml=a2" }, "edit in subdirectory not reloaded; loader saw %q", f.saw())

	// A new subdirectory is loaded, then watched.
	write(t, filepath.Join(dir, "new", "deep", "b.yaml"), "b1")
	polltest.Eventually(t, wait, func() bool { return f.saw() == "new/deep/b.yaml=b1;old/a.yaml=a2" }, "new subdirectory not loaded; loader saw %q", f.saw())
	write(t, filepath.Join(dir, "new", "deep", "b.yaml"), "b2")
	polltest.Eventually(t, wait, func() bool { return f.saw() == "new/deep/b.yaml=b2;old/a.yaml=a2" }, "edit in new subdirectory not reloaded; loader saw %q", f.saw())

	// A renamed subdirectory is reloaded and still watched under its new name.
	if err := os.Rename(filepath.Join(dir, "old"), filepath.Join(dir, "renamed")); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, wait, func() bool { return f.saw() == "new/deep/b.yaml=b2;renamed/a.yaml=a2" }, "renamed subdirectory not reloaded; loader saw %q", f.saw())
	write(t, filepath.Join(dir, "renamed", "a.yaml"), "a3")
	polltest.Eventually(t, wait, func() bool { return f.saw() == "new/deep/b.yaml=b2;renamed/a.yaml=a3" }, "edit in renamed subdirectory not reloaded; loader saw %q", f.saw())

	// A removed subdirectory is reloaded.
	if err := os.RemoveAll(filepath.Join(dir, "new")); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, wait, func() bool { return f.saw() == "renamed/a.yaml=a3" }, "removed subdirectory not reloaded; loader saw %q", f.saw())

	// A subdirectory moved out of the tree is reloaded: only the directory
	// itself reports the move, none of its files do.
	write(t, filepath.Join(dir, "keep.yaml"), "k")
	polltest.Eventually(t, wait, func() bool { return f.saw() == "keep.yaml=k;renamed/a.yaml=a3" }, "new file not loaded; loader saw %q", f.saw())
	if err := os.Rename(filepath.Join(dir, "renamed"), filepath.Join(t.TempDir(), "away")); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, wait, func() bool { return f.saw() == "keep.yaml=k" }, "subdirectory moved away not reloaded; loader saw %q", f.saw())
}

func TestTriggerForcesReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "x.yaml"), "v1")
	// A debounce far beyond the test's patience: only Trigger can reload in time.
	f := &fakeLoader{}
	r, err := reload.New(reload.Options{Dir: dir, Load: f.load, Debounce: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	calls := f.callCount()

	r.Trigger()
	polltest.Eventually(t, wait, func() bool { return f.callCount() == calls+1 }, "Trigger did not reload")
	if st := r.Status(); st.Reloads != uint64(calls+1) {
		t.Errorf("Status().Reloads = %d, want %d", st.Reloads, calls+1)
	}

	// Trigger also cuts a pending debounce short.
	write(t, filepath.Join(dir, "x.yaml"), "v2")
	r.Trigger()
	polltest.Eventually(t, wait, func() bool { return f.saw() == "x.yaml=v2" }, "Trigger did not pick up the edit; loader saw %q", f.saw())
}

func TestTriggerBeforeRunIsApplied(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "x.yaml"), "v1")
	r, f := newFake(t, dir)
	r.Trigger()
	r.Trigger() // coalesces with the first
	start(t, r)
	// New, Run's own reload, and one for the coalesced triggers.
	polltest.Eventually(t, wait, func() bool { return f.callCount() == 3 }, "loads = %d, want 3", f.callCount())
}

func TestReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "x.yaml"), "v1")
	f := &fakeLoader{}
	r, err := reload.New(reload.Options{Dir: dir, Load: f.load, Debounce: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// A Reload made before Run starts waits for it.
	write(t, filepath.Join(dir, "x.yaml"), "v2")
	early := make(chan error, 1)
	go func() { early <- r.Reload(t.Context()) }()
	start(t, r)
	if err := <-early; err != nil {
		t.Fatalf("Reload before Run: %v", err)
	}
	if got := f.saw(); got != "x.yaml=v2" {
		t.Errorf("after Reload the loader saw %q, want x.yaml=v2", got)
	}

	write(t, filepath.Join(dir, "x.yaml"), "v3")
	if err := r.Reload(t.Context()); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := f.saw(); got != "x.yaml=v3" {
		t.Errorf("after Reload the loader saw %q, want x.yaml=v3", got)
	}

	write(t, filepath.Join(dir, "x.yaml"), "broken")
	err = r.Reload(t.Context())
	if err == nil || !strings.Contains(err.Error(), "x.yaml:1: descriptors[0]: broken value") {
		t.Fatalf("Reload of a broken edit = %v, want the loader's error", err)
	}
	if st := r.Status(); st.LastError == nil || st.LastError.Error() != err.Error() {
		t.Errorf("Status().LastError = %v, want %v", st.LastError, err)
	}
}

func TestReloadAfterRunReturns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "x.yaml"), "v1")
	r, _ := newFake(t, dir)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := r.Reload(t.Context()); !errors.Is(err, reload.ErrNotRunning) {
		t.Errorf("Reload after Run = %v, want ErrNotRunning", err)
	}
	if err := r.Run(t.Context()); err == nil {
		t.Error("second Run succeeded")
	}
}

func TestLoaderPanicIsAFailure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "x.yaml"), "v1")
	panicking := false
	var mu sync.Mutex
	load := func(string) (*descriptor.Tree, error) {
		mu.Lock()
		defer mu.Unlock()
		if panicking {
			panic("bug in loader")
		}
		return &descriptor.Tree{}, nil
	}
	r, err := reload.New(reload.Options{Dir: dir, Load: load})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	mu.Lock()
	panicking = true
	mu.Unlock()
	if err := r.Reload(t.Context()); err == nil || !strings.Contains(err.Error(), "bug in loader") {
		t.Fatalf("Reload = %v, want the panic as an error", err)
	}
	if r.Current() == nil {
		t.Error("previous tree lost")
	}
}

// TestFailureLoggedOnce checks that a broken edit is logged once at error
// level with each of its errors, that the same failure repeating is not
// logged in full again, and that a new failure is.
func TestFailureLoggedOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "x.yaml"), "v1")
	logs := &logtest.Buffer{}
	f := &fakeLoader{}
	r, err := reload.New(reload.Options{
		Dir: dir, Load: f.load, Debounce: time.Hour,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)

	write(t, filepath.Join(dir, "x.yaml"), "broken")
	write(t, filepath.Join(dir, "y.yaml"), "broken")
	for range 2 {
		if err := r.Reload(t.Context()); err == nil {
			t.Fatal("Reload of broken files succeeded")
		}
	}
	write(t, filepath.Join(dir, "y.yaml"), "fine")
	if err := r.Reload(t.Context()); err == nil {
		t.Fatal("Reload of a broken file succeeded")
	}

	var errorRecords []map[string]any
	warnings := 0
	for _, rec := range records(t, logs) {
		switch rec["level"] {
		case "ERROR":
			errorRecords = append(errorRecords, rec)
		case "WARN":
			warnings++
		}
		if rec["component"] != "reload" {
			t.Errorf("record %v lacks component=reload", rec)
		}
	}
	if len(errorRecords) != 2 || warnings != 1 {
		t.Fatalf("got %d error and %d warning records, want 2 and 1", len(errorRecords), warnings)
	}
	wantErrors := [][]any{
		{"x.yaml:1: descriptors[0]: broken value", "y.yaml:1: descriptors[0]: broken value"},
		{"x.yaml:1: descriptors[0]: broken value"},
	}
	for i, rec := range errorRecords {
		got, _ := rec["errors"].([]any)
		if fmt.Sprint(got) != fmt.Sprint(wantErrors[i]) {
			t.Errorf("error record %d lists errors %v, want %v", i, got, wantErrors[i])
		}
	}
}

// records decodes the JSON log lines in logs.
func records(t *testing.T, logs *logtest.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	tel, err := telemetry.Setup(t.Context(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })

	dir := t.TempDir()
	write(t, filepath.Join(dir, "api.yaml"), limitYAML(10))
	r, err := reload.New(reload.Options{
		Dir: dir, Debounce: time.Hour, MeterProvider: tel.MeterProvider(),
		Now: func() time.Time { return time.Unix(1767225600, 500_000_000) },
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	write(t, filepath.Join(dir, "api.yaml"), "domain: api\nunknown_field: 1\n")
	if err := r.Reload(t.Context()); err == nil {
		t.Fatal("Reload of a broken file succeeded")
	}
	if len(r.Status().Hash) < 16 {
		t.Fatalf("Status().Hash = %q, want a real hash", r.Status().Hash)
	}

	body := scrape(t, tel)
	for _, want := range []string{
		`tollgate_config_reloads_total\{[^}]*result="success"[^}]*\} 2`,
		`tollgate_config_reloads_total\{[^}]*result="failure"[^}]*\} 1`,
		`tollgate_config_last_reload_success_timestamp_seconds 1\.7672256005e\+09`,
		`tollgate_config_last_reload_successful 0`,
		`tollgate_config_info\{[^}]*hash="` + regexp.QuoteMeta(r.Status().Hash) + `"[^}]*\} 1`,
	} {
		if !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(body) {
			t.Errorf("scrape has no line matching %s; got:\n%s", want, grep(body, "tollgate_config"))
		}
	}

	write(t, filepath.Join(dir, "api.yaml"), limitYAML(20))
	if err := r.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	body = scrape(t, tel)
	for _, want := range []string{
		`tollgate_config_last_reload_successful 1`,
		`tollgate_config_info\{[^}]*hash="` + regexp.QuoteMeta(r.Status().Hash) + `"[^}]*\} 1`,
	} {
		if !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(body) {
			t.Errorf("scrape has no line matching %s; got:\n%s", want, grep(body, "tollgate_config"))
		}
	}
	if n := strings.Count(body, "tollgate_config_info{"); n != 1 {
		t.Errorf("%d tollgate_config_info series, want 1: the old hash must go", n)
	}
}

func scrape(t *testing.T, tel *telemetry.Telemetry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

func grep(body, substr string) string {
	var b strings.Builder
	for line := range strings.Lines(body) {
		if strings.Contains(line, substr) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestRunStopsEverything checks that Run returns when its context ends and
// leaves no goroutine behind, fsnotify's reader included. It must not run
// in parallel with other tests, which start goroutines of their own.
func TestRunStopsEverything(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "x.yaml"), "v1")
	write(t, filepath.Join(dir, "sub", "y.yaml"), "v1")
	// Functions that run only in goroutines Run owns: Run itself and the
	// watcher's reader.
	ownGoroutines := []string{"reload.(*Reloader).Run(", "github.com/fsnotify/fsnotify."}
	baseline := runtime.NumGoroutine()

	r, f := newFake(t, dir)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	write(t, filepath.Join(dir, "x.yaml"), "v2")
	polltest.Eventually(t, wait, func() bool { return f.saw() == "sub/y.yaml=v1;x.yaml=v2" }, "Run is not watching")
	for _, fn := range ownGoroutines {
		if !strings.Contains(stacks(), fn) {
			t.Fatalf("no goroutine runs %s while Run runs", fn)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return after cancel")
	}
	polltest.Eventually(t, wait, func() bool { return runtime.NumGoroutine() <= baseline },
		"%d goroutines after Run returned, want at most %d", runtime.NumGoroutine(), baseline)
	for _, fn := range ownGoroutines {
		if strings.Contains(stacks(), fn) {
			t.Errorf("a goroutine still runs %s after Run returned", fn)
		}
	}
}

// stacks returns the stacks of all goroutines.
func stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
