package fleet

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/tollgatehq/tollgate/pkg/store"
)

// timeout bounds a publication on the channel and a read of the overrides
// that an event asks for.
const timeout = 5 * time.Second

// Local is what an instance holds of counters besides the shared store:
// leases and over-limit cache entries. The store chain implements it.
//
// Forget forgets the counters without giving back their leases: they were
// cleared in the shared store, which no longer holds the leased hits.
// Drop ends what is held of the counters match reports true for, giving
// their leases back, and Reset ends the lease of every counter; both
// return how many counters gave back their leases.
type Local interface {
	Forget(counters []store.Counter)
	Drop(match func(store.Counter) bool) int
	Reset() int
}

// Refresher reads the overrides again, as override.Registry.Refresh does.
type Refresher interface {
	Refresh(ctx context.Context) error
}

// Prefix names the counters an override covers: those of Domain whose
// entries begin with Entries.
type Prefix struct {
	Domain  string
	Entries []store.Entry
}

// Covers reports whether c is one of the counters p names.
func (p Prefix) Covers(c store.Counter) bool {
	return p.Domain == c.Domain && len(p.Entries) <= len(c.Entries) && slices.Equal(p.Entries, c.Entries[:len(p.Entries)])
}

// HandlerOptions configures a Handler. Overrides is required with a Bus.
type HandlerOptions struct {
	// Bus carries events to and from the other instances; nil without
	// Redis, where the Handler applies this instance's events only.
	Bus *Bus
	// Overrides is read again when another instance changed them, and
	// after every (re)subscription; nil without a Bus reads nothing.
	Overrides Refresher
	// Local is what the instance holds of counters; nil when it holds
	// nothing (the memory store).
	Local Local
	// Logger gets a line when leases are given back and when the
	// overrides or the other instances cannot be reached; the Handler
	// adds no attributes to it. nil discards.
	Logger *slog.Logger
}

// Handler is the one owner of forgetting: it applies the events that make
// an instance drop what it holds of counters, whether they happen on this
// instance or on another. A reload that changed the rules ends every
// lease (Local.Reset), since leases were sized and charged under the old
// rules; an override change, made here or heard of, ends what is held of
// the counters it covers (Local.Drop); a reset on another instance
// forgets its counters (Local.Forget). A reset here needs nothing of the
// Handler but telling the others: the store chain's Clear has forgotten
// the counters already.
type Handler struct {
	bus       *Bus
	overrides Refresher
	local     Local
	log       *slog.Logger
}

// NewHandler returns a Handler.
func NewHandler(opts HandlerOptions) (*Handler, error) {
	if opts.Bus != nil && opts.Overrides == nil {
		return nil, errors.New("fleet: a Handler with a Bus needs Overrides")
	}
	h := &Handler{bus: opts.Bus, overrides: opts.Overrides, local: opts.Local, log: opts.Logger}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	return h, nil
}

// RulesChanged is called after a reload swapped in rules that differ from
// the last: every counter is forgotten and its lease given back. Counters
// whose rules did not change lease again on their next hit.
func (h *Handler) RulesChanged() {
	if h.local == nil {
		return
	}
	if n := h.local.Reset(); n > 0 {
		h.log.Info("descriptor configuration changed: cached counters forgotten, their leases returned", "counters", n)
	}
}

// OverridesChanged is called with the overrides added, deleted or expired
// since the last call, wherever they changed: the counters they cover
// give back their leases, sized and charged under the old limit, and drop
// their over-limit cache entries.
func (h *Handler) OverridesChanged(changed []Prefix) {
	if h.local == nil {
		return
	}
	covers := func(c store.Counter) bool {
		return slices.ContainsFunc(changed, func(p Prefix) bool { return p.Covers(c) })
	}
	if n := h.local.Drop(covers); n > 0 {
		h.log.Info("overrides changed: leases of the counters they cover returned", "counters", n)
	}
}

// Reset is called after this instance cleared counters: it tells the
// other instances to forget what they hold of them. A failure is logged:
// what they hold ends by itself.
func (h *Handler) Reset(ctx context.Context, counters []store.Hit) {
	if h.bus == nil {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	ids := make([]store.Counter, len(counters))
	for i := range counters {
		ids[i] = counters[i].Counter()
	}
	if err := h.bus.Publish(pctx, Event{Reset: ids}); err != nil {
		h.log.Warn("telling other instances of a reset; their over-limit caches and leases end by themselves", "error", err)
	}
}

// Handle applies a change another instance made: it reads the overrides
// again (which calls OverridesChanged through the registry when they
// changed), and forgets what this instance holds of reset counters.
func (h *Handler) Handle(ctx context.Context, e Event) {
	if (e.Overrides || e.Resync) && h.overrides != nil {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		if err := h.overrides.Refresh(rctx); err != nil {
			h.log.Warn("reading overrides after a change elsewhere; retrying at the next refresh", "error", err)
		}
		cancel()
	}
	if len(e.Reset) > 0 && h.local != nil {
		h.local.Forget(e.Reset)
	}
}

// Run hands every event of the Bus to Handle until ctx ends (Bus.Run);
// without a Bus it returns at once.
func (h *Handler) Run(ctx context.Context) {
	if h.bus == nil {
		return
	}
	h.bus.Run(ctx, h.Handle)
}
