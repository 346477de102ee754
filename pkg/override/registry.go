package override

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// Registries.
//
// A Registry validates overrides against the live descriptor tree and
// keeps them in a Backend: in process, persisted in a state file, with the
// memory store (package override/statefile); in Redis, shared by a fleet,
// with the Redis store (package override/redis). It keeps a snapshot, a
// Set, that the limiter reads with one atomic load per request (nil when
// there are none).
//
// Which override applies: for a descriptor of a domain, the override of
// that domain whose entries are the longest prefix of the descriptor's
// entries, keys and values compared exactly (no wildcards); of equally
// long ones, the newest. With overrides on tenant=acme (×5) and on
// tenant=acme/user=u1 (absolute 100 per minute), the descriptor
// tenant=acme/user=u1/path=/x gets 100 per minute, tenant=acme/user=u2
// gets five times its rule's limits, and tenant=other its rule's. See
// package limiter for how the limits are replaced.
//
// Expiry: an override stops applying at its ExpiresAt on the registry's
// clock, at once, because Set.Match judges it on every call; Run drops it
// from the snapshot, the log and tollgate_overrides_active within a
// millisecond of that, and its backend forgets it (a Redis TTL, the state
// file's next write).
//
// Fleet: with Redis, a change made on one instance is published (Options.
// Publish, the fleet channel) and every instance reads the overrides again
// when it hears of it, within a round trip; each also reads them every
// RefreshInterval and after (re)subscribing, so a missed message or a
// restart converges.

// Backend keeps a registry's overrides: in process with a state file
// (package override/statefile) or in Redis (package override/redis).
//
// Load returns every override stored, expired ones possibly included. Put
// stores a new override. Delete removes the override with the id and
// returns it, or an error wrapping ErrNotFound.
type Backend interface {
	Load(ctx context.Context) ([]Override, error)
	Put(ctx context.Context, o Override) error
	Delete(ctx context.Context, id string) (Override, error)
}

// DefaultMaxTTL is the default of Options.MaxTTL.
const DefaultMaxTTL = 720 * time.Hour

// DefaultRefreshInterval is the default of Options.RefreshInterval.
const DefaultRefreshInterval = 10 * time.Second

// Options configures a Registry. Backend and Tree are required.
type Options struct {
	Backend Backend
	// Tree returns the live descriptor tree, which new overrides are
	// judged against.
	Tree func() *descriptor.Tree
	// MaxTTL bounds how far in the future an override may expire; 0
	// means DefaultMaxTTL.
	MaxTTL time.Duration
	// RefreshInterval is how often Run reads every override from the
	// backend again, so that a missed change or a restart converges; 0
	// means DefaultRefreshInterval. Run also wakes when an override
	// expires.
	RefreshInterval time.Duration
	// Publish, when set, is called after every change this registry
	// makes, to tell the other instances sharing the backend (which then
	// call Refresh). A failure is logged: the periodic read converges.
	Publish func(ctx context.Context) error
	// OnChange, when set, is called after each change of the live set
	// with the overrides added, deleted or expired since the last one;
	// the app drops local state (leases, over-limit cache entries) of the
	// counters they cover. Calls are serialized.
	OnChange func(changed []Override)
	// OnLearned, when set, is called for each override a refresh finds
	// that this registry did not make: made by another instance, by
	// anyone who can write to the backend, or before a restart. The app
	// audits it. Calls are serialized.
	OnLearned func(context.Context, Override)
	// Now is the clock of expiry and CreatedAt; nil means time.Now.
	Now func() time.Time
	// Logger gets one line per change; nil discards.
	Logger *slog.Logger
	// Values is how the log lines and the refusals show the overrides'
	// descriptor values; the zero value shows them as they are.
	Values descriptor.ValueView
	// MeterProvider provides tollgate_overrides_active; nil means a no-op
	// provider.
	MeterProvider metric.MeterProvider
}

// Registry holds the live overrides of an instance: it validates and
// stores new ones, deletes them, and keeps a snapshot (Current) that the
// limiter reads once per request. It is safe for concurrent use.
type Registry struct {
	backend  Backend
	tree     func() *descriptor.Tree
	maxTTL   time.Duration
	interval time.Duration
	publish  func(context.Context) error
	onChange func([]Override)
	learned  func(context.Context, Override)
	now      func() time.Time
	log      *slog.Logger
	values   descriptor.ValueView

	set  atomic.Pointer[Set]
	mu   sync.Mutex // serializes refreshes
	kick chan struct{}
	// skipped holds the ids of the stored overrides the last refresh
	// skipped, so that each is logged once; made those this instance
	// created and no refresh has seen yet, which are not logged again as
	// learned. r.mu guards both.
	skipped, made map[string]bool
}

// NewRegistry returns a Registry with an empty snapshot; call Refresh (or
// Run) to read the backend.
func NewRegistry(opts Options) (*Registry, error) {
	if opts.Backend == nil || opts.Tree == nil {
		return nil, errors.New("override registry: Backend and Tree are required")
	}
	if opts.MaxTTL < 0 || opts.RefreshInterval < 0 {
		return nil, errors.New("override registry: negative MaxTTL or RefreshInterval")
	}
	r := &Registry{
		backend:  opts.Backend,
		tree:     opts.Tree,
		maxTTL:   cmp.Or(opts.MaxTTL, DefaultMaxTTL),
		interval: cmp.Or(opts.RefreshInterval, DefaultRefreshInterval),
		publish:  opts.Publish,
		onChange: opts.OnChange,
		learned:  opts.OnLearned,
		now:      opts.Now,
		log:      opts.Logger,
		values:   opts.Values,
		kick:     make(chan struct{}, 1),
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.log = r.log.With("component", "overrides")
	mp := opts.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter("github.com/tollgatehq/tollgate/pkg/override")
	gauge, err := meter.Int64ObservableGauge("tollgate_overrides_active",
		metric.WithDescription("Overrides in force, by domain."))
	if err != nil {
		return nil, fmt.Errorf("override registry: creating instruments: %w", err)
	}
	if _, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for domain, n := range r.active() {
			o.ObserveInt64(gauge, int64(n), metric.WithAttributes(attribute.String("domain", domain)))
		}
		return nil
	}, gauge); err != nil {
		return nil, fmt.Errorf("override registry: creating instruments: %w", err)
	}
	return r, nil
}

// active counts the overrides in force now, by domain.
func (r *Registry) active() map[string]int {
	now := r.now()
	n := make(map[string]int)
	for _, o := range r.set.Load().All() {
		if now.Before(o.ExpiresAt) {
			n[o.Domain]++
		}
	}
	return n
}

// Current returns the snapshot of live overrides, nil when there are
// none. Its overrides may have expired since it was taken: Set.Match
// judges expiry at each call.
func (r *Registry) Current() *Set { return r.set.Load() }

// Create validates o against the live descriptor tree and stores it with
// a new ID and CreatedAt; it returns the stored override. A refusal wraps
// ErrInvalid and says why. The change applies on this instance when
// Create returns, and on the others when they hear of it (Publish) or
// read the backend next.
func (r *Registry) Create(ctx context.Context, o Override) (Override, error) {
	now := r.now()
	if err := r.validate(&o, now); err != nil {
		return Override{}, err
	}
	id, err := newID()
	if err != nil {
		return Override{}, err
	}
	o.ID, o.CreatedAt = id, now
	o.Entries = slices.Clone(o.Entries)
	r.mu.Lock()
	if r.made == nil {
		r.made = make(map[string]bool)
	}
	r.made[id] = true
	r.mu.Unlock()
	if o.Limit != nil {
		l := *o.Limit
		u, _ := descriptor.ParseUnit(l.Unit) // validated
		l.Unit = u.String()
		o.Limit = &l
	}
	if err := r.backend.Put(ctx, o); err != nil {
		return Override{}, fmt.Errorf("storing override: %w", err)
	}
	r.log.LogAttrs(ctx, slog.LevelInfo, "override created", r.describe(o)...)
	r.changed(ctx)
	return o, nil
}

// Delete removes the live override with the id and returns it; an
// unknown (or expired) id is an error wrapping ErrNotFound. The actor
// that WithActor put in ctx, if any, is logged.
func (r *Registry) Delete(ctx context.Context, id string) (Override, error) {
	o, err := r.backend.Delete(ctx, id)
	if err != nil {
		return Override{}, fmt.Errorf("deleting override %q: %w", id, err)
	}
	if !r.now().Before(o.ExpiresAt) {
		return Override{}, fmt.Errorf("deleting override %q: %w", id, ErrNotFound)
	}
	attrs := r.describe(o)
	if actor, ok := ctx.Value(actorKey{}).(string); ok {
		attrs = append(attrs, slog.String("deleted_by", actor))
	}
	r.log.LogAttrs(ctx, slog.LevelInfo, "override deleted", attrs...)
	r.changed(ctx)
	return o, nil
}

// List returns the live overrides of domain, or of every domain when
// domain is "", oldest first, read from the backend.
func (r *Registry) List(ctx context.Context, domain string) ([]Override, error) {
	all, err := r.backend.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing overrides: %w", err)
	}
	now := r.now()
	out := make([]Override, 0, len(all))
	for _, o := range all {
		if now.Before(o.ExpiresAt) && (domain == "" || o.Domain == domain) && r.checkStored(&o, now) == nil {
			out = append(out, o)
		}
	}
	slices.SortStableFunc(out, func(a, b Override) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// Get returns the live override with the id, or an error wrapping
// ErrNotFound.
func (r *Registry) Get(ctx context.Context, id string) (Override, error) {
	all, err := r.List(ctx, "")
	if err != nil {
		return Override{}, err
	}
	for _, o := range all {
		if o.ID == id {
			return o, nil
		}
	}
	return Override{}, fmt.Errorf("override %q: %w", id, ErrNotFound)
}

// changed refreshes the snapshot after a change made here and tells the
// other instances.
func (r *Registry) changed(ctx context.Context) {
	if err := r.Refresh(ctx); err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "reading overrides after a change", slog.Any("error", err))
	}
	if r.publish != nil {
		if err := r.publish(ctx); err != nil {
			r.log.LogAttrs(ctx, slog.LevelWarn, "telling other instances of an override change; they read it within the refresh interval",
				slog.Any("error", err))
		}
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Refresh reads every override from the backend and swaps in a new
// snapshot of the live ones; it calls OnChange with what changed and logs
// the overrides that expired. On an error the snapshot stays as it was.
func (r *Registry) Refresh(ctx context.Context) error {
	all, err := r.backend.Load(ctx)
	if err != nil {
		return fmt.Errorf("reading overrides: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.swap(ctx, all)
	return nil
}

// swap installs the live overrides of all; r.mu is held.
func (r *Registry) swap(ctx context.Context, all []Override) {
	now := r.now()
	live := make([]Override, 0, len(all))
	skipped := make(map[string]bool)
	for _, o := range all {
		if !now.Before(o.ExpiresAt) {
			continue
		}
		if err := r.checkStored(&o, now); err != nil {
			// Another instance, or anyone who can write to Redis, wrote
			// it: it is skipped, and said once.
			skipped[o.ID] = true
			if !r.skipped[o.ID] {
				r.log.LogAttrs(ctx, slog.LevelWarn, "stored override skipped", slog.String("id", o.ID), slog.Any("error", err))
			}
			continue
		}
		live = append(live, o)
	}
	r.skipped = skipped
	old := r.set.Load()
	next := NewSet(live)
	r.set.Store(next)

	var changed []Override
	was := make(map[string]bool, old.Len())
	for _, o := range old.All() {
		was[o.ID] = true
	}
	is := make(map[string]bool, len(live))
	for _, o := range live {
		is[o.ID] = true
		if !was[o.ID] {
			changed = append(changed, o)
			if r.made[o.ID] {
				delete(r.made, o.ID)
			} else {
				// Made by another instance, or before a restart.
				r.log.LogAttrs(ctx, slog.LevelInfo, "override learned from the store", r.describe(o)...)
				if r.learned != nil {
					r.learned(ctx, o)
				}
			}
		}
	}
	for _, o := range old.All() {
		if !is[o.ID] {
			changed = append(changed, o)
			if !now.Before(o.ExpiresAt) {
				r.log.LogAttrs(ctx, slog.LevelInfo, "override expired", r.describe(o)...)
			}
		}
	}
	if len(changed) > 0 && r.onChange != nil {
		r.onChange(changed)
	}
}

// Run refreshes the snapshot every RefreshInterval and when a live
// override expires, until ctx ends. Expiry applies at once without it
// (Set.Match judges it); Run drops expired overrides from the snapshot,
// the metric and the log, and calls OnChange for them.
func (r *Registry) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-timer.C:
			if err := r.Refresh(ctx); err != nil && ctx.Err() == nil {
				r.log.LogAttrs(ctx, slog.LevelWarn, "reading overrides; keeping the last ones read", slog.Any("error", err))
			}
		}
		timer.Reset(r.untilNext())
	}
}

// untilNext returns the time until the next refresh: the refresh
// interval, or sooner the next expiry (a millisecond after it).
func (r *Registry) untilNext() time.Duration {
	wait := r.interval
	now := r.now()
	for _, o := range r.set.Load().All() {
		if d := o.ExpiresAt.Sub(now) + time.Millisecond; d < wait {
			wait = max(d, time.Millisecond)
		}
	}
	return wait
}

// validate checks o as Create must, at now.
func (r *Registry) validate(o *Override, now time.Time) error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if o.Domain == "" {
		return invalid("no domain")
	}
	dom := r.tree().Domain(o.Domain)
	if dom == nil {
		return invalid("unknown domain %q", o.Domain)
	}
	if err := checkShape(o); err != nil {
		return err
	}
	if !dom.Counts(o.Entries) {
		return invalid("entries %s resolve to no rule with a limit in domain %q", formatEntries(r.values.ShowEntries(o.Entries)), o.Domain)
	}
	lv := &Live{Override: *o}
	if o.Limit != nil {
		lv.unit, _ = descriptor.ParseUnit(o.Limit.Unit) // checkShape parsed it
	}
	// Every limit the override would give a rule it covers must be one
	// the algorithms take, as the rule's own are: a sliding-window log
	// multiplied past its bound would reject every request.
	var bad error
	dom.EachCounted(o.Entries, func(rule *descriptor.Rule) bool {
		for _, l := range lv.apply(rule.Limits) {
			if err := l.Algo().Validate(); err != nil {
				bad = fmt.Errorf("rule %s: %w", rule.Path, err)
				return false
			}
		}
		return true
	})
	if bad != nil {
		return invalid("the limit it would give %v", bad)
	}
	switch {
	case o.ExpiresAt.IsZero():
		return invalid("no expiry")
	case !o.ExpiresAt.After(now):
		return invalid("expiry %s is in the past", o.ExpiresAt.Format(time.RFC3339))
	case o.ExpiresAt.Sub(now) > r.maxTTL:
		return invalid("expiry %s is more than the maximum %v away", o.ExpiresAt.Format(time.RFC3339), r.maxTTL)
	}
	return nil
}

// checkShape reports what makes o unusable whatever the rules: no
// entries or an empty key, not exactly one of a limit (with a known unit)
// and a positive multiplier. Overrides read from the backend are held to
// it too, since another instance (or anyone with write access to Redis)
// may have written them.
func checkShape(o *Override) error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if len(o.Entries) == 0 {
		return invalid("no entries")
	}
	for i, e := range o.Entries {
		if e.Key == "" {
			return invalid("entries[%d]: empty key", i)
		}
	}
	switch {
	case o.Limit != nil && o.Multiplier != 0:
		return invalid("both limit and multiplier; set one")
	case o.Limit == nil && o.Multiplier == 0:
		return invalid("neither limit nor multiplier; set one")
	case o.Limit == nil && !(o.Multiplier > 0 && !math.IsInf(o.Multiplier, 1)):
		return invalid("multiplier %v: must be positive", o.Multiplier)
	}
	if o.Limit != nil {
		if _, err := descriptor.ParseUnit(o.Limit.Unit); err != nil {
			return invalid("limit: %v", err)
		}
	}
	return nil
}

// checkStored reports what makes an override read from the backend
// unusable: checkShape's faults, no domain, or an expiry further than
// MaxTTL.
func (r *Registry) checkStored(o *Override, now time.Time) error {
	if o.Domain == "" {
		return fmt.Errorf("%w: no domain", ErrInvalid)
	}
	if err := checkShape(o); err != nil {
		return err
	}
	if o.ExpiresAt.Sub(now) > r.maxTTL {
		return fmt.Errorf("%w: expiry %s is more than the maximum %v away", ErrInvalid, o.ExpiresAt.Format(time.RFC3339), r.maxTTL)
	}
	return nil
}

// formatEntries writes entries as key=value pairs joined by "/", as rule
// paths are written.
func formatEntries(entries []descriptor.Entry) string {
	var b []byte
	for i, e := range entries {
		if i > 0 {
			b = append(b, '/')
		}
		b = append(b, e.Key...)
		b = append(b, '=')
		b = append(b, e.Value...)
	}
	return string(b)
}

// describe returns the log attributes of o: what it does, to what (its
// values as r shows them), until when, who made it and why.
func (r *Registry) describe(o Override) []slog.Attr {
	attrs := []slog.Attr{
		slog.String("id", o.ID),
		slog.String("domain", o.Domain),
		slog.String("entries", formatEntries(r.values.ShowEntries(o.Entries))),
	}
	if o.Limit != nil {
		attrs = append(attrs, slog.String("limit", fmt.Sprintf("%d/%s", o.Limit.RequestsPerUnit, o.Limit.Unit)))
	} else {
		attrs = append(attrs, slog.Float64("multiplier", o.Multiplier))
	}
	return append(attrs,
		slog.Time("expires_at", o.ExpiresAt),
		slog.String("created_by", o.CreatedBy),
		slog.String("reason", o.Reason))
}

// newID returns a random override ID: 16 hex digits.
func newID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("override id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

type actorKey struct{}

// WithActor returns ctx carrying the name of who acts (an admin token's
// name), which Delete logs.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}
