package reload_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/polltest"
	"github.com/tollgatehq/tollgate/pkg/reload"
)

// These tests run the Reloader with the real descriptor.Load.

// limitYAML is a one-rule domain: path=/a allows perMinute requests.
func limitYAML(perMinute int) string {
	return fmt.Sprintf(`domain: api
descriptors:
  - key: path
    value: /a
    rate_limit:
      unit: minute
      requests_per_unit: %d
`, perMinute)
}

// limitOf returns the requests per minute the tree allows for path=/a, or
// -1 when no rule matches.
func limitOf(tree *descriptor.Tree) int {
	d := tree.Domain("api")
	if d == nil {
		return -1
	}
	rule := d.Match([]descriptor.Entry{{Key: "path", Value: "/a"}})
	if rule == nil || len(rule.Limits) != 1 {
		return -1
	}
	return int(rule.Limits[0].RequestsPerUnit)
}

func newReal(t *testing.T, dir string) *reload.Reloader {
	t.Helper()
	r, err := reload.New(reload.Options{Dir: dir})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

func TestRealEditGoesLive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "api.yaml"), limitYAML(10))
	r := newReal(t, dir) // the default debounce
	old := r.Current()
	if got := limitOf(old); got != 10 {
		t.Fatalf("initial limit = %d, want 10", got)
	}
	start(t, r)

	write(t, filepath.Join(dir, "api.yaml"), limitYAML(20))
	began := time.Now()
	polltest.Eventually(t, wait, func() bool { return limitOf(r.Current()) == 20 }, "edit not live")
	t.Logf("edit live after %v", time.Since(began))

	tree := r.Current()
	st := r.Status()
	if tree == old || tree.Hash() == old.Hash() {
		t.Error("the tree was not replaced")
	}
	if st.Hash != tree.Hash() || st.LastError != nil {
		t.Errorf("Status() = %+v, want hash %s and no error", st, tree.Hash())
	}
	if limitOf(old) != 10 {
		t.Error("the previous tree changed; trees must be immutable")
	}
}

func TestRealBrokenEditKeepsTree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "api.yaml"), limitYAML(10))
	write(t, filepath.Join(dir, "web.yaml"), "domain: web\ndescriptors: []\n")
	r := newReal(t, dir)
	start(t, r)
	tree := r.Current()
	failures := r.Status().Failures

	// Two broken files: the error lists both, each with file and line.
	write(t, filepath.Join(dir, "api.yaml"), limitYAML(20)+"    burst_size: 5\n")
	write(t, filepath.Join(dir, "web.yaml"), "domain: web\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	polltest.Eventually(t, wait, func() bool {
		st := r.Status()
		return st.Failures > failures && st.LastError != nil &&
			strings.Contains(st.LastError.Error(), "api.yaml") && strings.Contains(st.LastError.Error(), "web.yaml")
	}, "broken edit not reported; status %+v", r.Status())

	var derr *descriptor.Error
	if err := r.Status().LastError; !errors.As(err, &derr) || derr.Line == 0 {
		t.Errorf("LastError %v holds no *descriptor.Error with a line", err)
	}
	if r.Current() != tree || limitOf(r.Current()) != 10 {
		t.Error("a broken edit replaced the live tree")
	}

	write(t, filepath.Join(dir, "web.yaml"), "domain: web\ndescriptors: []\n")
	write(t, filepath.Join(dir, "api.yaml"), limitYAML(30))
	polltest.Eventually(t, wait, func() bool { return limitOf(r.Current()) == 30 && r.Status().LastError == nil },
		"fixed edit not live; status %+v", r.Status())
}

// TestRealUnchangedHashKeepsTree rewrites a file with a change that does
// not alter the parsed configuration: the reload succeeds without a swap.
func TestRealUnchangedHashKeepsTree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "api.yaml"), limitYAML(10))
	r := newReal(t, dir)
	start(t, r)
	tree := r.Current()
	reloads := r.Status().Reloads

	write(t, filepath.Join(dir, "api.yaml"), "# a comment changes nothing\n"+limitYAML(10))
	polltest.Eventually(t, wait, func() bool { return r.Status().Reloads > reloads }, "edit not reloaded")
	if r.Current() != tree {
		t.Error("an unchanged configuration was swapped in")
	}
}

func TestRealKubernetesSymlinkSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "..2026_a", "api.yaml"), limitYAML(10))
	symlink(t, "..2026_a", filepath.Join(dir, "..data"))
	symlink(t, filepath.Join("..data", "api.yaml"), filepath.Join(dir, "api.yaml"))
	r := newReal(t, dir)
	if got := limitOf(r.Current()); got != 10 {
		t.Fatalf("initial limit = %d, want 10", got)
	}
	start(t, r)

	write(t, filepath.Join(dir, "..2026_b", "api.yaml"), limitYAML(20))
	symlink(t, "..2026_b", filepath.Join(dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	// The kubelet then removes the old data directory.
	if err := os.RemoveAll(filepath.Join(dir, "..2026_a")); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, wait, func() bool { return limitOf(r.Current()) == 20 }, "..data swap not live")
}

// writeLargeTree writes a configuration of about descriptors descriptor
// nodes: files of 250 keyed descriptors, each with one nested descriptor,
// both limited.
func writeLargeTree(tb testing.TB, dir string, descriptors int) {
	tb.Helper()
	const perFile = 250
	for f := 0; f*perFile*2 < descriptors; f++ {
		var b strings.Builder
		fmt.Fprintf(&b, "domain: domain_%03d\ndescriptors:\n", f)
		for i := range perFile {
			fmt.Fprintf(&b, `  - key: api_key
    value: key_%05d
    rate_limit: {unit: minute, requests_per_unit: %d}
    descriptors:
      - key: endpoint
        value: /v1/resource/%d
        rate_limit: {unit: second, requests_per_unit: 10, algorithm: sliding_window_counter}
`, i, 100+i, i)
		}
		name := filepath.Join(dir, fmt.Sprintf("domain_%03d.yaml", f))
		if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkReload measures a reload of a 10 000-descriptor configuration
// through the coordinator, as the admin endpoint runs it: read, decode,
// validate and hash every file, then swap. The loader alternates between
// two directories that differ in one limit, so every reload swaps.
func BenchmarkReload(b *testing.B) {
	dirs := [2]string{b.TempDir(), b.TempDir()}
	writeLargeTree(b, dirs[0], 10_000)
	writeLargeTree(b, dirs[1], 10_000)
	write(b, filepath.Join(dirs[1], "extra.yaml"), limitYAML(10))
	var n int
	load := func(string) (*descriptor.Tree, error) {
		n++ // only the coordinator calls the loader, one call at a time
		return descriptor.Load(dirs[n%2], descriptor.Options{})
	}
	r, err := reload.New(reload.Options{Dir: dirs[0], Load: load, Debounce: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	}()

	// A Reload waits for Run to start, and so for Run's own first reload:
	// both happen outside the timed loop.
	if err := r.Reload(ctx); err != nil {
		b.Fatal(err)
	}

	b.ReportAllocs()
	for b.Loop() {
		before := r.Current()
		if err := r.Reload(ctx); err != nil {
			b.Fatal(err)
		}
		if r.Current() == before {
			b.Fatal("reload did not swap")
		}
	}
}
