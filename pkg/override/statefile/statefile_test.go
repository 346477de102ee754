package statefile_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/override/statefile"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ov(id string, expires time.Time) override.Override {
	return override.Override{ID: id, Domain: "api", Entries: []descriptor.Entry{{Key: "k", Value: id}},
		Multiplier: 2, ExpiresAt: expires, CreatedAt: t0, Reason: "r", CreatedBy: "ops"}
}

// TestPersists checks that what one Store writes the next one reads,
// that deletions and expiries persist too, and that no temporary file is
// left behind.
func TestPersists(t *testing.T) {
	dir := t.TempDir()
	clock := storetest.NewClock(t0)
	ctx := context.Background()
	s, err := statefile.Open(dir, statefile.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := ov("a", t0.Add(time.Hour)), ov("b", t0.Add(time.Minute)), ov("c", t0.Add(time.Hour))
	for _, o := range []override.Override{a, b, c} {
		if err := s.Put(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Delete(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	reopened, err := statefile.Open(dir, statefile.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := reopened.Load(ctx); !reflect.DeepEqual(got, []override.Override{a, b}) {
		t.Fatalf("reopened: %+v, want a and b", got)
	}
	clock.Advance(time.Minute) // b expires; the next write drops it
	if _, err := reopened.Delete(ctx, "nope"); !errors.Is(err, override.ErrNotFound) {
		t.Fatalf("Delete(nope) = %v, want %v", err, override.ErrNotFound)
	}
	if err := reopened.Put(ctx, c); err != nil {
		t.Fatal(err)
	}
	again, err := statefile.Open(dir, statefile.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := again.Load(ctx); !reflect.DeepEqual(got, []override.Override{a, c}) {
		t.Fatalf("after the expiry: %+v, want a and c", got)
	}
	files, _ := os.ReadDir(dir)
	if len(files) != 1 || files[0].Name() != statefile.FileName {
		t.Fatalf("the state directory holds %v, want only %s", files, statefile.FileName)
	}
}

// TestCorrupt checks that a state file that cannot be decoded is moved
// aside with a clear error in the log, and that the Store starts empty
// and works.
func TestCorrupt(t *testing.T) {
	tests := []struct {
		name, contents, why string
	}{
		{"not JSON", "{\"version\": 1, \"overrides\": [", "unexpected end of JSON input"},
		{"another version", `{"version": 7, "overrides": []}`, "unknown version 7 (want 1)"},
		{"incomplete override", `{"version": 1, "overrides": [{"id": "x"}]}`, "overrides[0]: incomplete override"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, statefile.FileName)
			if err := os.WriteFile(path, []byte(tt.contents), 0o600); err != nil {
				t.Fatal(err)
			}
			logs := &logtest.Buffer{}
			s, err := statefile.Open(dir, statefile.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if got, _ := s.Load(context.Background()); len(got) != 0 {
				t.Fatalf("started with %+v, want nothing", got)
			}
			aside, _ := filepath.Glob(path + ".corrupt-*")
			if len(aside) != 1 {
				t.Fatalf("files set aside: %v, want one", aside)
			}
			if kept, err := os.ReadFile(aside[0]); err != nil || string(kept) != tt.contents {
				t.Fatalf("the file set aside holds %q, %v; want the corrupt contents", kept, err)
			}
			line := logs.String()
			for _, want := range []string{"level=ERROR", "override state file is corrupt; moved aside, starting with no overrides",
				"file=" + path, "moved_to=" + aside[0], tt.why} {
				if !strings.Contains(line, want) {
					t.Errorf("the log lacks %q:\n%s", want, line)
				}
			}
			if err := s.Put(context.Background(), ov("a", time.Now().Add(time.Hour))); err != nil {
				t.Fatalf("Put after a corrupt file: %v", err)
			}
		})
	}
}

// TestUnwritable checks that a change the file cannot take is refused and
// not kept.
func TestUnwritable(t *testing.T) {
	dir := t.TempDir()
	s, err := statefile.Open(dir, statefile.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	// A directory where the file goes: no rename can replace it, even as
	// root.
	if err := os.Mkdir(filepath.Join(dir, statefile.FileName), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(context.Background(), ov("a", t0.Add(time.Hour))); err == nil || !strings.Contains(err.Error(), "writing override state") {
		t.Fatalf("Put = %v, want a write error", err)
	}
	if got, _ := s.Load(context.Background()); len(got) != 0 {
		t.Fatalf("a refused override is kept: %+v", got)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, statefile.FileName+".tmp-*")); len(tmp) != 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
}
