// Package reload keeps the live descriptor tree in step with its
// configuration directory.
//
// A Reloader loads the tree once when it is created and refuses to start on
// a broken configuration. Its Run method then watches the directory and
// applies reloads in one coordinator goroutine, in order, whatever asked for
// them: a file-system event, a SIGHUP the application forwards to Trigger,
// or a call to Reload, which waits for the outcome. Every reload builds and
// validates a complete new tree off to the side and swaps it in with one
// atomic store; a broken edit is logged and counted and the previous tree
// stays live.
//
// The watcher follows directories, not files, because editors save by
// writing a temporary file and renaming it over the original, and
// Kubernetes updates a mounted ConfigMap by swapping a "..data" symlink.
// Events on *.yaml and *.yml files, on "..data", on subdirectories and on
// the values files the live rules read (descriptor.Tree.ValuesFiles) start
// a debounced reload. While the latest reload has failed, an event on any
// file does, since the fix may be a values file that only the broken rules
// name. Names beginning with "." are otherwise ignored, as descriptor.Load
// ignores them.
//
// Rules may also come from elsewhere, such as an xDS stream: a Reloader
// made without a directory loads nothing itself and serves what its owner
// hands to Apply, through the same validation, swap, status and metrics.
package reload

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// DefaultDebounce is the quiet period used when Options.Debounce is zero.
const DefaultDebounce = 100 * time.Millisecond

// maxDelayFactor bounds how long a stream of events can postpone a reload:
// at most maxDelayFactor debounce periods after the first event of a burst.
const maxDelayFactor = 4

// ErrNotRunning reports that Reload was called after Run returned.
var ErrNotRunning = errors.New("reload: Run is not running")

// ErrNoDirectory reports that Reload was called on a Reloader without a
// directory, whose rules arrive through Apply.
var ErrNoDirectory = errors.New("reload: no configuration directory to reload")

// Options configures a Reloader. The zero value makes a Reloader without
// a directory, fed through Apply.
type Options struct {
	// Dir is the configuration directory. Empty means the rules come from
	// another source through Apply: New loads nothing, Run watches nothing,
	// and Current returns Initial until the first Apply succeeds.
	Dir string
	// Source names a Reloader without a directory in its errors and logs,
	// such as "xds". Empty means "external". It is ignored with a Dir.
	Source string
	// Initial is the tree a Reloader without a directory serves until the
	// first Apply succeeds. Nil means none: Current returns nil, which
	// callers take as "not ready". It is ignored with a Dir.
	Initial *descriptor.Tree
	// Load builds a tree from Dir. Nil means descriptor.Load with zero
	// descriptor.Options.
	Load func(dir string) (*descriptor.Tree, error)
	// Debounce is how long the directory must stay quiet after an event
	// before a reload starts. A steady stream of events delays a reload by
	// at most four times Debounce. Zero means DefaultDebounce.
	Debounce time.Duration
	// Logger receives reload outcomes. Nil discards them.
	Logger *slog.Logger
	// MeterProvider creates the reload metrics. Nil disables them.
	MeterProvider metric.MeterProvider
	// Now returns the time recorded for a successful reload. Nil means
	// time.Now. Debouncing always uses the monotonic clock.
	Now func() time.Time
	// OnChange, if set, is called with the new tree after a reload swaps
	// in a tree whose hash differs from the live one's, or the first tree
	// of a Reloader without a Dir (rules that arrive after the start), but
	// not for the tree New loads from Dir; one call at a time, before the
	// reload returns. The app uses it to forget state kept for the old
	// rules.
	OnChange func(*descriptor.Tree)
	// History is how many events History keeps; 0 means DefaultHistory.
	History int
	// Set names a rule set other than the live one, such as "shadow": its
	// logs carry that component instead of "reload", and its metrics are
	// named tollgate_<Set>_config_* instead of tollgate_config_*, so that
	// two Reloaders can share a logger and a meter provider.
	Set string
	// StartBroken lets New succeed when the first load of Dir fails: the
	// failure is recorded, counted and logged like a failed reload's,
	// Current returns nil until a load succeeds, and Run watches Dir as
	// usual. The live rules never start broken; a rule set the service
	// can do without, such as the shadow rules, must not keep it from
	// starting.
	StartBroken bool
}

// DefaultHistory is how many events History keeps when Options.History is
// zero.
const DefaultHistory = 20

// Event is one entry of the history: a rule set that became live, or a
// reload that failed.
type Event struct {
	Time time.Time `json:"time"`
	// Source is where the rules come from: the directory, or the owner's
	// source (such as "xds"); Reason is what asked for the load ("initial",
	// "file change", "SIGHUP", "xds version 7").
	Source string `json:"source"`
	Reason string `json:"reason"`
	// Hash is the rule set's, and Previous the one it replaced ("" for the
	// first); for a failure, Hash is the one that stayed live.
	Hash     string `json:"hash"`
	Previous string `json:"previous,omitempty"`
	// Added, Removed and Changed name the domains that differ from the
	// previous rule set.
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Changed []string `json:"changed,omitempty"`
	// Errors are a failed reload's errors, one a line, each naming its
	// file, line and descriptor path; none for a rule set that loaded.
	Errors []string `json:"errors,omitempty"`
	// Repeats counts the failures identical to this one that followed it.
	Repeats int `json:"repeats,omitempty"`
}

// Failed reports whether e is a failed reload.
func (e Event) Failed() bool { return len(e.Errors) > 0 }

// Status describes the outcome of the reloads so far.
type Status struct {
	// LastSuccess is when a load last succeeded, including the initial one.
	LastSuccess time.Time
	// Hash identifies the live tree.
	Hash string
	// LastError is the error of the latest reload, or nil when it succeeded.
	LastError error
	// Reloads counts successful loads, the initial one included, whether
	// or not they changed the tree.
	Reloads uint64
	// Failures counts failed reloads.
	Failures uint64
}

// Reloader owns the live descriptor tree and the reloads that replace it.
// Its methods are safe for concurrent use.
type Reloader struct {
	dir      string
	source   string // dir, or Options.Source without one
	load     func(dir string) (*descriptor.Tree, error)
	onChange func(*descriptor.Tree)
	// startBroken is Options.StartBroken.
	startBroken bool
	debounce    time.Duration
	log         *slog.Logger
	now         func() time.Time
	metrics     *metrics

	current atomic.Pointer[descriptor.Tree]

	// trigger holds at most one pending Trigger, so calls coalesce.
	trigger chan struct{}
	// requests carries Reload calls to the coordinator; each brings a
	// channel with room for its answer.
	requests chan chan error
	// started is set by the first Run; stopped is closed when it returns.
	started atomic.Bool
	stopped chan struct{}

	// applyMu keeps loads and swaps one at a time, whoever asks for them.
	applyMu sync.Mutex

	mu     sync.Mutex
	status Status
	// history keeps the latest events, oldest first, at most historySize.
	history     []Event
	historySize int
	// lastFailure is the text of the latest failure, so that a failure
	// repeating itself is not logged in full again.
	lastFailure string
}

// New loads the tree in opts.Dir and returns a Reloader serving it. It fails
// when that first load fails, so a service never starts on a broken
// configuration. Watching starts with Run. Without a Dir, New loads
// nothing and serves opts.Initial.
func New(opts Options) (*Reloader, error) {
	r := &Reloader{
		dir:         opts.Dir,
		source:      opts.Dir,
		load:        opts.Load,
		onChange:    opts.OnChange,
		startBroken: opts.StartBroken,
		debounce:    opts.Debounce,
		historySize: cmp.Or(opts.History, DefaultHistory),
		log:         opts.Logger,
		now:         opts.Now,
		trigger:     make(chan struct{}, 1),
		requests:    make(chan chan error),
		stopped:     make(chan struct{}),
	}
	if r.load == nil {
		r.load = func(dir string) (*descriptor.Tree, error) {
			return descriptor.Load(dir, descriptor.Options{})
		}
	}
	if r.debounce <= 0 {
		r.debounce = DefaultDebounce
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	component := cmp.Or(opts.Set, "reload")
	if r.dir != "" {
		r.log = r.log.With(slog.String("component", component), slog.String("dir", r.dir))
	} else {
		r.source = cmp.Or(opts.Source, "external")
		r.log = r.log.With(slog.String("component", component), slog.String("source", r.source))
	}
	if r.now == nil {
		r.now = time.Now
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m, err := newMetrics(mp, opts.Set, r)
	if err != nil {
		return nil, fmt.Errorf("reload: creating metrics: %w", err)
	}
	r.metrics = m

	if r.dir == "" {
		if opts.Initial != nil {
			r.current.Store(opts.Initial)
			r.status.Hash = opts.Initial.Hash()
		}
		return r, nil
	}
	if err := r.apply("initial"); err != nil && !r.startBroken {
		// Nothing will serve the gauges; the counter keeps the failure.
		_ = m.observer.Unregister()
		return nil, err
	}
	return r, nil
}

// Current returns the live tree. Callers load it once per request and use
// that snapshot throughout; it is never modified.
func (r *Reloader) Current() *descriptor.Tree {
	return r.current.Load()
}

// Status returns the outcome of the reloads so far.
func (r *Reloader) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// Trigger asks for a reload without waiting for it, as a forwarded SIGHUP
// does. The reload skips the debounce period. Calls made while one is
// pending coalesce into it. A Trigger made before Run is applied when Run
// starts.
func (r *Reloader) Trigger() {
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

// Reload performs a reload through the coordinator and returns its error,
// nil when the configuration loaded (changed or not). A call made before
// Run starts waits for it. Reload returns ErrNotRunning once Run has
// returned, and ctx.Err() if ctx ends first, in which case the reload may
// still happen.
func (r *Reloader) Reload(ctx context.Context) error {
	answer := make(chan error, 1)
	select {
	case r.requests <- answer:
	case <-r.stopped:
		return ErrNotRunning
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-answer:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Apply builds a tree with load and swaps it in exactly as a reload of the
// directory does: all or nothing, recorded in Status and the metrics, the
// previous tree kept live on failure. It returns the failure, nil when the
// tree loaded (changed or not). reason is logged, such as "xds version 7".
// Apply is for a Reloader without a directory, whose owner feeds it; it
// does not need Run and may be called from any goroutine.
func (r *Reloader) Apply(reason string, load func() (*descriptor.Tree, error)) error {
	return r.applyWith(reason, load)
}

// apply loads the configuration directory and, when it loaded, swaps the
// new tree in. New and the coordinator call it.
func (r *Reloader) apply(reason string) error {
	return r.applyWith(reason, func() (*descriptor.Tree, error) { return r.load(r.dir) })
}

// applyWith loads a tree with load and, when it loaded, swaps it in.
func (r *Reloader) applyWith(reason string, load func() (*descriptor.Tree, error)) error {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	start := time.Now()
	tree, err := safeLoad(load)
	elapsed := time.Since(start)
	if err == nil && tree == nil {
		err = errors.New("loader returned no tree and no error")
	}
	if err != nil {
		wrapped := fmt.Errorf("loading descriptors from %s: %w", r.source, err)
		r.recordFailure(reason, wrapped, err)
		return wrapped
	}

	hash := tree.Hash()
	old := r.current.Load()
	changed := old == nil || old.Hash() != hash
	if changed {
		r.current.Store(tree)
	}

	r.mu.Lock()
	prevHash := r.status.Hash
	recovered := r.status.LastError != nil
	r.status.LastSuccess = r.now()
	r.status.Hash = r.current.Load().Hash()
	r.status.LastError = nil
	r.status.Reloads++
	r.lastFailure = ""
	if changed {
		e := Event{Time: r.status.LastSuccess, Source: r.source, Reason: reason, Hash: hash}
		if old != nil {
			e.Previous = old.Hash()
		}
		e.Added, e.Removed, e.Changed = descriptor.DiffDomains(old, tree)
		r.remember(e)
	}
	r.mu.Unlock()
	r.metrics.success()
	if changed && (old != nil || r.dir == "") && r.onChange != nil {
		r.onChange(tree)
	}

	switch {
	case old == nil:
		r.log.Info("descriptor configuration loaded",
			slog.String("hash", hash), slog.Duration("took", elapsed))
	case changed:
		r.log.Info("descriptor configuration reloaded",
			slog.String("reason", reason), slog.String("hash", hash),
			slog.String("previous_hash", prevHash), slog.Duration("took", elapsed))
	case recovered:
		r.log.Info("descriptor configuration loads again; live tree unchanged",
			slog.String("reason", reason), slog.String("hash", hash), slog.Duration("took", elapsed))
	default:
		r.log.Debug("descriptor configuration unchanged",
			slog.String("reason", reason), slog.String("hash", hash), slog.Duration("took", elapsed))
	}
	return nil
}

// safeLoad runs load, turning a panic into an error so that a bad edit can
// never take the service down.
func safeLoad(load func() (*descriptor.Tree, error)) (tree *descriptor.Tree, err error) {
	defer func() {
		if p := recover(); p != nil {
			tree, err = nil, fmt.Errorf("loader panicked: %v", p)
		}
	}()
	return load()
}

// recordFailure records err, a failed load caused by the loader's error
// cause, counts it and logs cause's errors. A failure identical to the
// previous one is logged in one short line rather than in full again.
func (r *Reloader) recordFailure(reason string, err, cause error) {
	text := err.Error()
	r.mu.Lock()
	r.status.LastError = err
	r.status.Failures++
	repeated := text == r.lastFailure
	r.lastFailure = text
	live := r.status.Hash
	if n := len(r.history); repeated && n > 0 && r.history[n-1].Failed() {
		r.history[n-1].Repeats++
	} else {
		r.remember(Event{Time: r.now(), Source: r.source, Reason: reason, Hash: live, Errors: errorLines(cause)})
	}
	r.mu.Unlock()
	r.metrics.failure()

	if r.dir != "" && r.current.Load() == nil && !r.startBroken {
		// The initial load: New returns the error to the caller.
		return
	}
	if repeated {
		msg := "descriptor configuration still broken; previous tree stays live"
		if live == "" {
			msg = "descriptor configuration still broken; no tree loaded yet"
		}
		r.log.Warn(msg,
			slog.String("reason", reason), slog.String("live_hash", live))
		return
	}
	msgs := errorLines(cause)
	msg := "descriptor configuration rejected; previous tree stays live"
	if live == "" {
		msg = "descriptor configuration rejected; no tree loaded yet"
	}
	r.log.Error(msg,
		slog.String("reason", reason), slog.String("live_hash", live),
		slog.Int("error_count", len(msgs)), slog.Any("errors", msgs))
}

// remember appends e to the history, dropping the oldest beyond its size.
// r.mu must be held.
func (r *Reloader) remember(e Event) {
	if len(r.history) == r.historySize {
		r.history = append(r.history[:0], r.history[1:]...)
	}
	r.history = append(r.history, e)
}

// History returns the latest events, newest first: the rule sets that
// became live (the first included) and the failed reloads, a failure
// repeating itself counted in Repeats.
func (r *Reloader) History() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Event, len(r.history))
	for i, e := range r.history {
		out[len(out)-1-i] = e
	}
	return out
}

// errorLines splits err into its lines: errors.Join separates the errors
// it joins with newlines, and a descriptor error is one line naming its
// file, line and path.
func errorLines(err error) []string {
	return strings.Split(err.Error(), "\n")
}
