package audit

import (
	"os"
	"path/filepath"
	"testing"
)

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestFileFollowsRotation moves the audit file away, as a log rotation
// does, and checks that the next entry goes to a new file at the path,
// and that Reopen starts a new file too.
func TestFileFollowsRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	write := func(s string) {
		t.Helper()
		if _, err := f.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	write("one\n")
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	write("two\n")
	if got, old := readFile(t, path), readFile(t, path+".1"); got != "two\n" || old != "one\n" {
		t.Errorf("after the move: the file holds %q, the moved one %q; want %q and %q", got, old, "two\n", "one\n")
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the new file: %v, %v; want mode 0600", st, err)
	}
	// Reopen (on SIGHUP) opens the path again, and keeps appending.
	if err := f.Reopen(); err != nil {
		t.Fatal(err)
	}
	write("three\n")
	if got := readFile(t, path); got != "two\nthree\n" {
		t.Errorf("after Reopen the file holds %q, want %q", got, "two\nthree\n")
	}
	if n := f.Failures(); n != 0 {
		t.Errorf("%d failures, want 0", n)
	}
}

// TestFileCountsFailures writes to a device that refuses every write and
// checks that each failure is counted and returned.
func TestFileCountsFailures(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full here")
	}
	f, err := OpenFile("/dev/full")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	for range 3 {
		if _, err := f.Write([]byte("entry\n")); err == nil {
			t.Fatal("a write to /dev/full succeeded")
		}
	}
	if n := f.Failures(); n != 3 {
		t.Errorf("%d failures, want 3", n)
	}
}
