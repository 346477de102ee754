package reload

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

func TestRelevant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"/etc/tollgate/api.yaml", true},
		{"/etc/tollgate/api.yml", true},
		{"/etc/tollgate/API.YAML", true},
		{"/etc/tollgate/..data", true},
		{"/etc/tollgate/..data_tmp", false},
		{"/etc/tollgate/..2026_03_01_12_00_00.123", false},
		{"/etc/tollgate/.api.yaml.swp", false},
		{"/etc/tollgate/.api.yaml", false},
		{"/etc/tollgate/api.yaml~", false},
		{"/etc/tollgate/4913", false},
		{"/etc/tollgate/README.md", false},
	} {
		if got := relevant(tc.name); got != tc.want {
			t.Errorf("relevant(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// debounced runs a coordinator inside a synctest bubble and feeds it
// events itself, in place of fsnotify, so the debounce is tested on the
// bubble's fake clock: every step lands at an exact instant, and
// synctest.Wait lets the coordinator finish reacting before the test looks.
type debounced struct {
	t      *testing.T
	dir    string
	events chan fsnotify.Event
	errs   chan error
	r      *Reloader
	loads  atomic.Int64 // loads since New's
	cancel context.CancelFunc
	done   chan error
}

// newDebounced starts a coordinator with the given debounce period. It
// must be called inside the bubble, so that the Reloader's channels and
// the coordinator's timer belong to it.
func newDebounced(t *testing.T, period time.Duration) *debounced {
	return newDebouncedIn(t, t.TempDir(), period, func(string) (*descriptor.Tree, error) {
		return &descriptor.Tree{}, nil
	})
}

// newDebouncedIn is newDebounced with the configuration directory dir and
// the loader load.
func newDebouncedIn(t *testing.T, dir string, period time.Duration, load func(dir string) (*descriptor.Tree, error)) *debounced {
	h := &debounced{
		t:      t,
		dir:    dir,
		events: make(chan fsnotify.Event),
		errs:   make(chan error),
		done:   make(chan error, 1),
	}
	r, err := New(Options{
		Dir:      h.dir,
		Debounce: period,
		Load: func(dir string) (*descriptor.Tree, error) {
			h.loads.Add(1)
			return load(dir)
		},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.r = r
	h.loads.Store(0) // forget New's own load
	c := &coordinator{r: r, events: h.events, errs: h.errs, watched: make(map[string]bool)}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- c.loop(ctx) }()
	synctest.Wait()
	return h
}

// event sends the coordinator one watcher event on name, a file in the
// configuration directory, and waits until it has been handled.
func (h *debounced) event(name string, op fsnotify.Op) {
	h.events <- fsnotify.Event{Name: filepath.Join(h.dir, name), Op: op}
	synctest.Wait()
}

// watchError sends the coordinator one watcher error.
func (h *debounced) watchError() {
	h.errs <- errors.New("fsnotify: queue or buffer overflow")
	synctest.Wait()
}

// trigger calls Trigger, as a forwarded SIGHUP does.
func (h *debounced) trigger() {
	h.r.Trigger()
	synctest.Wait()
}

// advance moves the fake clock on by d and lets every timer due by then
// fire.
func (h *debounced) advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// want checks the number of loads since the coordinator started.
func (h *debounced) want(loads int64, when string) {
	h.t.Helper()
	if got := h.loads.Load(); got != loads {
		h.t.Errorf("%s: %d loads, want %d", when, got, loads)
	}
}

// stop ends the coordinator and checks that its loop returned nil.
func (h *debounced) stop() {
	h.cancel()
	if err := <-h.done; err != nil {
		h.t.Errorf("loop = %v, want nil", err)
	}
}

func TestDebounce(t *testing.T) {
	const period = 100 * time.Millisecond
	tests := []struct {
		name  string
		steps func(h *debounced)
	}{
		{
			name: "one event reloads once the directory has been quiet for the period",
			steps: func(h *debounced) {
				h.event("x.yaml", fsnotify.Write)
				h.advance(period - time.Nanosecond)
				h.want(0, "just before the period ends")
				h.advance(time.Nanosecond)
				h.want(1, "when the period ends")
				h.advance(10 * period)
				h.want(1, "long after")
			},
		},
		{
			name: "a burst reloads once, a period after its last event",
			steps: func(h *debounced) {
				for range 30 {
					h.event("x.yaml", fsnotify.Write)
				}
				h.advance(period / 2)
				h.event("y.yml", fsnotify.Create)
				h.advance(period / 2)
				h.want(0, "a period after the first event, half one after the last")
				h.advance(period/2 - time.Nanosecond)
				h.want(0, "just before the last event's period ends")
				h.advance(time.Nanosecond)
				h.want(1, "a period after the last event")
				h.advance(10 * period)
				h.want(1, "long after")
			},
		},
		{
			name: "a steady stream reloads four periods after its first event",
			steps: func(h *debounced) {
				// An event every half period never leaves the directory
				// quiet for a whole one.
				for range 8 {
					h.event("x.yaml", fsnotify.Write)
					h.advance(period / 2)
				}
				h.want(1, "four periods after the first event")
				// The stream goes on: the next reload comes four periods
				// after the first event that followed the reload.
				for range 7 {
					h.event("x.yaml", fsnotify.Write)
					h.advance(period / 2)
				}
				h.want(1, "three and a half periods into the second burst")
				h.event("x.yaml", fsnotify.Write)
				h.advance(period/2 - time.Nanosecond)
				h.want(1, "just before four periods into the second burst")
				h.advance(time.Nanosecond)
				h.want(2, "four periods into the second burst")
			},
		},
		{
			name: "events that cannot change the configuration do not reload",
			steps: func(h *debounced) {
				h.event("x.yaml", fsnotify.Chmod)
				h.event(".x.yaml.swp", fsnotify.Write)
				h.event("README.md", fsnotify.Create)
				h.event("..data_tmp", fsnotify.Create)
				h.advance(10 * period)
				h.want(0, "long after")
			},
		},
		{
			name: "Kubernetes' ..data swap reloads",
			steps: func(h *debounced) {
				h.event("..data", fsnotify.Create)
				h.advance(period)
				h.want(1, "a period after the swap")
			},
		},
		{
			name: "a watcher error reloads to catch up, after the period",
			steps: func(h *debounced) {
				h.watchError()
				h.advance(period - time.Nanosecond)
				h.want(0, "just before the period ends")
				h.advance(time.Nanosecond)
				h.want(1, "when the period ends")
			},
		},
		{
			name: "a trigger reloads at once and satisfies the pending reload",
			steps: func(h *debounced) {
				h.event("x.yaml", fsnotify.Write)
				h.advance(period / 2)
				h.trigger()
				h.want(1, "right after the trigger")
				h.advance(10 * period)
				h.want(1, "long after")
				// The next event starts a new period of its own.
				h.event("x.yaml", fsnotify.Write)
				h.advance(period)
				h.want(2, "a period after the next event")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newDebounced(t, period)
				tt.steps(h)
				h.stop()
			})
		})
	}
}

// TestDebounceValuesFiles checks that a change to a values file that the
// live rules read reloads, a change to another file does not, and that
// while the latest reload has failed a change to any file does.
func TestDebounceValuesFiles(t *testing.T) {
	const period = 100 * time.Millisecond
	dir := t.TempDir()
	for name, data := range map[string]string{
		"api.yaml":        "domain: api\ndescriptors:\n  - key: k\n    values_file: lists/deny.txt\n    action: deny\n",
		"lists/deny.txt":  "v1\n",
		"lists/other.txt": "named by no rule\n",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		var fail atomic.Bool
		h := newDebouncedIn(t, dir, period, func(dir string) (*descriptor.Tree, error) {
			if fail.Load() {
				return nil, errors.New("broken")
			}
			return descriptor.Load(dir, descriptor.Options{})
		})
		h.event("lists/other.txt", fsnotify.Write)
		h.event("notes.txt", fsnotify.Create)
		h.advance(10 * period)
		h.want(0, "after changes to files the rules do not read")

		h.event("lists/deny.txt", fsnotify.Write)
		h.advance(period)
		h.want(1, "a period after a change to the values file")
		h.event("lists/deny.txt", fsnotify.Rename)
		h.advance(period)
		h.want(2, "a period after the values file was renamed away")

		fail.Store(true)
		h.trigger()
		h.want(3, "after the failed reload")
		fail.Store(false)
		h.event("lists/new.txt", fsnotify.Create)
		h.advance(period)
		h.want(4, "a period after a new file appeared while the rules were broken")
		h.event("lists/new.txt", fsnotify.Write)
		h.advance(10 * period)
		h.want(4, "after a change to that file once the rules load again")
		h.event(".x.swp", fsnotify.Write)
		h.advance(10 * period)
		h.want(4, "after a change to a hidden file")
		h.stop()
	})
}
