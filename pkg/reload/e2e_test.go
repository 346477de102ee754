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

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
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

// denied reports whether the tree denies api_key=key.
func denied(tree *descriptor.Tree, key string) bool {
	r := tree.Domain("keys").Match([]descriptor.Entry{{Key: "api_key", Value: key}})
	return r != nil && r.Action == descriptor.ActionDeny
}

// TestRealValuesFileEdits edits values files under a running Reloader: an
// edit of a list goes live, a rule naming a list not yet written fails and
// keeps the tree, and writing the list then brings the rule live.
func TestRealValuesFileEdits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rules := "domain: keys\ndescriptors:\n  - key: api_key\n    values_file: lists/revoked.txt\n    action: deny\n"
	write(t, filepath.Join(dir, "keys.yaml"), rules)
	write(t, filepath.Join(dir, "lists", "revoked.txt"), "# revoked\nk1\n")
	r := newReal(t, dir)
	if !denied(r.Current(), "k1") || denied(r.Current(), "k2") {
		t.Fatal("the initial list is not k1 alone")
	}
	start(t, r)

	// Editors write a new file and rename it over the old one.
	write(t, filepath.Join(dir, "lists", "revoked.txt.tmp"), "# revoked\nk1\nk2\n")
	if err := os.Rename(filepath.Join(dir, "lists", "revoked.txt.tmp"), filepath.Join(dir, "lists", "revoked.txt")); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, wait, func() bool { return denied(r.Current(), "k2") }, "list edit not live")

	// A broken list keeps the tree, with the list's file and line.
	tree := r.Current()
	write(t, filepath.Join(dir, "lists", "revoked.txt"), "k1\nk2\nk3\nk1\n")
	wantErr := filepath.Join(dir, "lists", "revoked.txt") + `:4: api_key in lists/revoked.txt: duplicate value "k1" (first at line 1)`
	polltest.Eventually(t, wait, func() bool {
		err := r.Status().LastError
		return err != nil && strings.HasSuffix(err.Error(), ": "+wantErr)
	}, "broken list not reported")
	if r.Current() != tree {
		t.Error("a broken list replaced the live tree")
	}

	// A rule naming a list that does not exist yet fails; the list's
	// arrival, a file the live rules do not read, brings it live.
	write(t, filepath.Join(dir, "lists", "revoked.txt"), "k1\nk2\n")
	write(t, filepath.Join(dir, "bots.yaml"), "domain: bots\ndescriptors:\n  - key: ua\n    values_file: lists/bots.txt\n    action: deny\n")
	polltest.Eventually(t, wait, func() bool {
		err := r.Status().LastError
		return err != nil && strings.Contains(err.Error(), "values_file: lists/bots.txt does not exist")
	}, "missing list not reported")
	write(t, filepath.Join(dir, "lists", "bots.txt"), "scraper*\n")
	polltest.Eventually(t, wait, func() bool {
		bots := r.Current().Domain("bots")
		return bots != nil && bots.Match([]descriptor.Entry{{Key: "ua", Value: "scraper/1.0"}}) != nil
	}, "new list not live")
	if r.Status().LastError != nil {
		t.Errorf("LastError = %v after the fix", r.Status().LastError)
	}
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
