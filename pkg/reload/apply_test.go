package reload_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/reload"
)

// treeOf builds a tree from one YAML file named name.
func treeOf(name, yaml string) func() (*descriptor.Tree, error) {
	return func() (*descriptor.Tree, error) {
		return descriptor.LoadFS(fstest.MapFS{name: {Data: []byte(yaml)}}, descriptor.Options{})
	}
}

func TestApplyWithoutDirectory(t *testing.T) {
	empty, err := descriptor.LoadFS(fstest.MapFS{}, descriptor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		initial *descriptor.Tree
	}{
		{"waits for the first tree", nil},
		{"starts with an empty tree", empty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := reload.New(reload.Options{Source: "xds", Initial: tc.initial})
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Current(); got != tc.initial {
				t.Fatalf("Current() before Apply = %v, want the initial tree %v", got, tc.initial)
			}

			good := treeOf("xds/a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
			if err := r.Apply("xds version 1", good); err != nil {
				t.Fatalf("Apply(good) = %v", err)
			}
			live := r.Current()
			if live == nil || live.Domain("a") == nil {
				t.Fatalf("Current() after Apply has no domain a: %v", live)
			}

			bad := treeOf("xds/a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
			err = r.Apply("xds version 2", bad)
			const want = `loading descriptors from xds: xds/a.yaml:4: k: rate_limit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`
			if err == nil || err.Error() != want {
				t.Fatalf("Apply(bad) = %v, want %s", err, want)
			}
			if r.Current() != live {
				t.Fatal("a failed Apply replaced the live tree")
			}
			st := r.Status()
			if st.Reloads != 1 || st.Failures != 1 || st.LastError == nil || st.Hash != live.Hash() {
				t.Fatalf("Status() = %+v, want 1 reload, 1 failure, the live hash %s and the last error", st, live.Hash())
			}
		})
	}
}

func TestRunWithoutDirectory(t *testing.T) {
	r, err := reload.New(reload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	r.Trigger() // dropped, must not block or fail
	if err := r.Reload(t.Context()); !errors.Is(err, reload.ErrNoDirectory) {
		t.Fatalf("Reload() = %v, want %v", err, reload.ErrNoDirectory)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run() = %v", err)
	}
}

// TestOnChange checks that OnChange sees every swap to a tree with a new
// hash, the first tree of rules fed from outside (xDS) included, and
// nothing else: not an unchanged or failed reload.
func TestOnChange(t *testing.T) {
	var seen []string
	r, err := reload.New(reload.Options{Source: "xds", OnChange: func(tree *descriptor.Tree) { seen = append(seen, tree.Hash()) }})
	if err != nil {
		t.Fatal(err)
	}
	one := treeOf("xds/a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	two := treeOf("xds/a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, precision: cached}\n")
	bad := treeOf("xds/a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	var want []string
	steps := []struct {
		load    func() (*descriptor.Tree, error)
		changes bool
	}{
		{one, true},  // the first tree, where there was none
		{one, false}, // unchanged
		{bad, false}, // failed
		{two, true},
		{one, true},
	}
	for i, st := range steps {
		_ = r.Apply("step", st.load)
		if st.changes {
			want = append(want, r.Current().Hash())
		}
		if len(seen) != len(want) || (len(want) > 0 && seen[len(seen)-1] != want[len(want)-1]) {
			t.Fatalf("after step %d: OnChange saw %v, want %v", i, seen, want)
		}
	}
}

// TestOnChangeNotForTheInitialTree checks that a Reloader with a Dir does
// not call OnChange for the tree New loads, only for a later change.
func TestOnChangeNotForTheInitialTree(t *testing.T) {
	dir := t.TempDir()
	const rule = "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	calls := 0
	r, err := reload.New(reload.Options{Dir: dir, OnChange: func(*descriptor.Tree) { calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 0 {
		t.Fatalf("OnChange called %d times for the initial tree, want 0", calls)
	}
	if err := r.Apply("edit", treeOf("a.yaml", strings.Replace(rule, "requests_per_unit: 1", "requests_per_unit: 2", 1))); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("OnChange called %d times after a change, want 1", calls)
	}
}

// TestHistory applies rule sets and failures and checks the history: the
// sets that became live with their per-domain diff, each distinct
// failure with its errors and repeats, newest first, at most History.
func TestHistory(t *testing.T) {
	clock := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	r, err := reload.New(reload.Options{Source: "xds", History: 4, Now: func() time.Time { clock = clock.Add(time.Second); return clock }})
	if err != nil {
		t.Fatal(err)
	}
	rules := func(domains ...string) func() (*descriptor.Tree, error) {
		fs := fstest.MapFS{}
		for _, d := range domains {
			name, limit, _ := strings.Cut(d, "=")
			fs["xds/"+name+".yaml"] = &fstest.MapFile{Data: []byte("domain: " + name + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + limit + "}\n")}
		}
		return func() (*descriptor.Tree, error) { return descriptor.LoadFS(fs, descriptor.Options{}) }
	}
	broken := treeOf("xds/a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	steps := []struct {
		reason string
		load   func() (*descriptor.Tree, error)
	}{
		{"v1", rules("a=1", "b=1")},
		{"v2", rules("a=2", "c=1")},
		{"v2 again", rules("a=2", "c=1")}, // unchanged: no entry
		{"v3", broken},
		{"v4", broken}, // the same failure: a repeat
		{"v5", rules("a=2")},
	}
	for _, s := range steps {
		_ = r.Apply(s.reason, s.load)
	}
	got := r.History()
	summary := make([]string, len(got))
	for i, e := range got {
		summary[i] = fmt.Sprintf("%s %s +%v -%v ~%v errors=%d repeats=%d prev=%t", e.Reason, e.Source, e.Added, e.Removed, e.Changed, len(e.Errors), e.Repeats, e.Previous != "")
	}
	want := []string{
		"v5 xds +[] -[c] ~[] errors=0 repeats=0 prev=true",
		"v3 xds +[] -[] ~[] errors=1 repeats=1 prev=false",
		"v2 xds +[c] -[b] ~[a] errors=0 repeats=0 prev=true",
		"v1 xds +[a b] -[] ~[] errors=0 repeats=0 prev=false",
	}
	if !slices.Equal(summary, want) {
		t.Fatalf("history:\n%s\nwant:\n%s", strings.Join(summary, "\n"), strings.Join(want, "\n"))
	}
	if !got[1].Failed() || !strings.Contains(got[1].Errors[0], `unknown unit "fortnight"`) || got[1].Hash != got[2].Hash {
		t.Errorf("the failure %+v does not name its error and the hash that stayed live", got[1])
	}
	if !got[3].Time.Before(got[2].Time) {
		t.Errorf("times %v, %v are not in order", got[3].Time, got[2].Time)
	}
	// One more entry pushes the oldest out.
	_ = r.Apply("v6", rules("d=1"))
	if got := r.History(); len(got) != 4 || got[0].Reason != "v6" || got[3].Reason != "v2" {
		t.Fatalf("after a fifth entry the history is %d long, from %s to %s; want 4, v6 to v2", len(got), got[0].Reason, got[len(got)-1].Reason)
	}
}
