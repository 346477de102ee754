package reload

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Run watches the configuration directory and applies reloads until ctx is
// done. It then closes the watcher and returns nil once everything it
// started has stopped. It returns an error if the watch cannot be set up
// or the watcher fails for good. Run may be called once.
//
// Right after the watch is set up, Run reloads once, so an edit made
// between New and Run is not missed; usually the tree is unchanged and the
// reload is silent.
func (r *Reloader) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("reload: Run called more than once")
	}
	defer close(r.stopped)
	if ctx.Err() != nil {
		return nil
	}
	if r.dir == "" {
		return r.idle(ctx)
	}

	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("reload: starting watcher: %w", err)
	}
	// Close stops fsnotify's reader goroutine and waits for it.
	defer w.Close()

	c := &coordinator{r: r, w: w, events: w.Events, errs: w.Errors, watched: make(map[string]bool)}
	if err := c.watchTree(r.dir); err != nil {
		return fmt.Errorf("reload: watching %s: %w", r.dir, err)
	}
	// A failure is recorded and logged like any other; the old tree stays.
	_ = r.apply("start")
	return c.loop(ctx)
}

// idle is Run for a Reloader without a directory: there is nothing to
// watch or reload, so a Trigger is dropped and a Reload answered with
// ErrNoDirectory until ctx is done.
func (r *Reloader) idle(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.trigger:
			r.log.Debug("reload asked for, but the rules come from " + r.source + "; nothing to do")
		case answer := <-r.requests:
			answer <- ErrNoDirectory
		}
	}
}

// coordinator is the state of the one goroutine that runs Run: the
// watcher, the directories it watches and the pending debounced reload.
type coordinator struct {
	r *Reloader
	w *fsnotify.Watcher
	// events and errs are the watcher's channels, which loop reads; a
	// test may feed its own instead and leave w nil if it sends no event
	// that adds or removes a watch.
	events  <-chan fsnotify.Event
	errs    <-chan error
	watched map[string]bool // directories under watch, by cleaned path

	// lists are the values files the live tree read, by cleaned path: a
	// change to one reloads like a change to a rule file.
	lists map[string]bool
	// broken is set while the latest reload failed: then a change to any
	// file reloads, since the fix may be a values file that the broken
	// rules name and the live ones do not.
	broken bool

	timer *time.Timer
	// firstEvent is when the oldest event not yet reloaded arrived; zero
	// when no reload is pending.
	firstEvent time.Time
}

// loop applies reloads as events, triggers and requests arrive, one at a
// time, until ctx is done.
func (c *coordinator) loop(ctx context.Context) error {
	c.timer = time.NewTimer(time.Hour)
	c.timer.Stop()
	defer c.timer.Stop()
	c.track()

	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-c.events:
			if !ok {
				return errors.New("reload: watcher closed unexpectedly")
			}
			c.handle(ev)
		case err, ok := <-c.errs:
			if !ok {
				return errors.New("reload: watcher closed unexpectedly")
			}
			// An overflow loses events; a reload catches up with them.
			c.r.log.Warn("watcher error; reloading to catch up", slog.Any("error", err))
			c.schedule()
		case <-c.timer.C:
			_ = c.reload("watch") // apply logs and counts a failure
		case <-c.r.trigger:
			_ = c.reload("trigger")
		case answer := <-c.r.requests:
			answer <- c.reload("admin")
		}
	}
}

// reload applies a reload now, which also satisfies any pending one.
func (c *coordinator) reload(reason string) error {
	c.timer.Stop()
	c.firstEvent = time.Time{}
	err := c.r.apply(reason)
	c.track()
	return err
}

// track notes the values files of the live tree and whether the latest
// reload failed, for handle.
func (c *coordinator) track() {
	if c.lists == nil {
		c.lists = make(map[string]bool)
	}
	clear(c.lists)
	for _, name := range c.r.Current().ValuesFiles() {
		c.lists[filepath.Clean(name)] = true
	}
	c.broken = c.r.Status().LastError != nil
}

// schedule arms the debounce timer: the reload starts once the directory
// has been quiet for the debounce period, but no later than
// maxDelayFactor periods after the first event of the burst.
func (c *coordinator) schedule() {
	now := time.Now()
	if c.firstEvent.IsZero() {
		c.firstEvent = now
	}
	deadline := c.firstEvent.Add(maxDelayFactor * c.r.debounce)
	c.timer.Reset(max(min(c.r.debounce, deadline.Sub(now)), 0))
}

// handle reacts to one watcher event: it follows new and vanished
// directories and schedules a reload when the event concerns the
// configuration.
func (c *coordinator) handle(ev fsnotify.Event) {
	name := filepath.Clean(ev.Name)
	switch {
	case ev.Op == fsnotify.Chmod:
		// Permission and timestamp changes leave the content as it was.
		return
	case ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename):
		if c.unwatch(name) {
			c.schedule()
			return
		}
	case ev.Has(fsnotify.Create) && !hidden(name):
		if info, err := os.Lstat(name); err == nil && info.IsDir() {
			// A new directory may arrive with files in it already, and
			// files may be written before its watch is in place: the
			// scheduled reload reads whatever is there.
			if err := c.watchTree(name); err != nil {
				c.r.log.Warn("cannot watch new directory", slog.String("path", name), slog.Any("error", err))
			}
			c.schedule()
			return
		}
	}
	if relevant(name) || c.lists[name] || (c.broken && !hidden(name)) {
		c.schedule()
	}
}

// watchTree watches root and every directory below it whose name does not
// begin with ".", the directories descriptor.Load reads.
func (c *coordinator) watchTree(root string) error {
	root = filepath.Clean(root)
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path != root && errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != root && hidden(path) {
			return filepath.SkipDir
		}
		if c.watched[path] {
			return nil
		}
		if err := c.w.Add(path); err != nil {
			return fmt.Errorf("watching %s: %w", path, err)
		}
		c.watched[path] = true
		return nil
	})
}

// unwatch forgets a removed or renamed directory and those below it, and
// reports whether name was one. The kernel drops the watch of a deleted
// directory by itself; a renamed one keeps its watch under a stale name,
// so it is removed here. A directory renamed within the tree comes back
// through a Create event.
func (c *coordinator) unwatch(name string) bool {
	if !c.watched[name] {
		return false
	}
	prefix := name + string(filepath.Separator)
	for path := range c.watched {
		if path == name || strings.HasPrefix(path, prefix) {
			delete(c.watched, path)
			// The watch may be gone already; that is what we want.
			_ = c.w.Remove(path)
		}
	}
	return true
}

// relevant reports whether a change to the file name can change the
// configuration: a YAML file, or the "..data" symlink through which
// Kubernetes swaps a ConfigMap's files all at once.
func relevant(name string) bool {
	base := filepath.Base(name)
	if base == "..data" {
		return true
	}
	if strings.HasPrefix(base, ".") {
		return false
	}
	ext := strings.ToLower(filepath.Ext(base))
	return ext == ".yaml" || ext == ".yml"
}

// hidden reports whether the base of name begins with ".", as Kubernetes'
// "..data" and timestamped directories and editors' swap files do.
func hidden(name string) bool {
	return strings.HasPrefix(filepath.Base(name), ".")
}
