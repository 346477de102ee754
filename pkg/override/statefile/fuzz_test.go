package statefile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/override/statefile"
)

// FuzzOpen opens a state file of arbitrary content. It asserts that Open
// never panics nor fails on content alone; that a file it cannot decode is
// moved aside unchanged and leaves no overrides; and that what it loads
// round-trips: written back (by a Put, with a clock before every expiry so
// that nothing is dropped) and opened again, it gives the same overrides,
// and so it does once that Put's override is deleted.
func FuzzOpen(f *testing.F) {
	for _, seed := range []string{
		`{"version": 1, "overrides": []}`,
		`{"version": 1, "overrides": [{"id": "a1", "domain": "api", "entries": [{"key": "k", "value": "v"}], "multiplier": 2.5,
		  "expires_at": "2026-03-02T12:00:00Z", "reason": "launch", "created_by": "ops", "created_at": "2026-03-01T12:00:00+01:00"}]}`,
		`{"version": 1, "overrides": [{"id": "a2", "domain": "api", "entries": [{"key": "k", "value": "\u0000"}, {"key": "", "value": ""}],
		  "limit": {"requests_per_unit": 4294967295, "unit": "minute"}, "expires_at": "0000-01-01T00:00:00-23:59", "created_at": "9999-12-31T23:59:59.999999999Z"}]}`,
		`{"version": 1, "overrides": [{"id": "a3", "domain": "api", "entries": [{"key": "k"}], "multiplier": 1e308, "expires_at": "2026-03-02T12:00:00Z"}]}`,
		`{"version": 1, "overrides": [{"id": "a4", "domain": "api", "entries": [{"key": "k"}], "multiplier": -1, "expires_at": "2026-03-02T12:00:00Z"}]}`,
		`{"version": 1, "overrides": [{"id": "x"}]}`,
		`{"version": 1, "overrides": [{"id": "a5", "domain": "api", "entries": [{"key": "k"}], "multiplier": 2, "limit": {"requests_per_unit": 1, "unit": "s"}}]}`,
		`{"version": 7, "overrides": []}`,
		`{"version": 1, "overrides": null, "extra": true}`,
		`{"version": 1} trailing`,
		`[]`,
		`{`,
		``,
	} {
		f.Add([]byte(seed))
	}
	// Before any time RFC 3339 can write, so that no loaded override has
	// expired when it is written back.
	early := time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)
	extra := override.Override{ID: "extra", Domain: "api", Entries: []descriptor.Entry{{Key: "k", Value: "v"}},
		Multiplier: 2, ExpiresAt: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)}

	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		dir := t.TempDir()
		path := filepath.Join(dir, statefile.FileName)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		open := func() []override.Override {
			t.Helper()
			s, err := statefile.Open(dir, statefile.Options{Now: func() time.Time { return early }})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			list, err := s.Load(ctx)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			return list
		}
		loaded := open()

		aside, _ := filepath.Glob(path + ".corrupt-*")
		if len(aside) > 0 {
			moved, err := os.ReadFile(aside[0])
			switch {
			case err != nil:
				t.Fatal(err)
			case len(aside) != 1 || !bytes.Equal(moved, data):
				t.Fatalf("moved aside %v with other content", aside)
			case len(loaded) > 0:
				t.Fatalf("a corrupt file loaded %d overrides", len(loaded))
			}
			return
		}

		// The override written back with them, under an id of its own.
		extra := extra
		for slices.ContainsFunc(loaded, func(o override.Override) bool { return o.ID == extra.ID }) {
			extra.ID += "x"
		}
		s, err := statefile.Open(dir, statefile.Options{Now: func() time.Time { return early }})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, extra); err != nil {
			t.Fatalf("writing back what loaded: %v\nfile: %q", err, data)
		}
		if got, want := encode(t, open()), encode(t, append(loaded, extra)); got != want {
			t.Fatalf("written back and opened again:\n%s\nwant\n%s", got, want)
		}
		if _, err := s.Delete(ctx, extra.ID); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if got, want := encode(t, open()), encode(t, loaded); got != want {
			t.Fatalf("after the delete, opened again:\n%s\nwant\n%s", got, want)
		}
	})
}

// encode returns list as JSON: overrides that encode alike are the same,
// whatever *time.Location their times carry, and no list is the empty one.
func encode(t *testing.T, list []override.Override) string {
	t.Helper()
	if list == nil {
		list = []override.Override{}
	}
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
