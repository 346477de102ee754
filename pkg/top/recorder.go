package top

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// DefaultCapacity is the default of Options.Capacity: the counters per
// rule identity and interval, and so the number of values that can be
// named with their counts.
const DefaultCapacity = 64

// MaxCapacity bounds Options.Capacity.
const MaxCapacity = 1 << 16

// OverrideLimit is the limit name of the decisions of overrides (Envoy's
// per-descriptor limits and the operators' live overrides), as the
// tollgate_decisions metric names them.
const OverrideLimit = "(override)"

// RuleID is the identity of a rule that summaries are kept for: the
// domain, the rule's path (as explain prints it; "" for an override of
// a descriptor that matches no rule) and the name of the limit that
// decided (OverrideLimit for an override), the labels of the
// tollgate_decisions metric.
type RuleID struct {
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	Limit  string `json:"limit"`
}

// Peers gives the latest snapshots of the fleet's other instances, for a
// Recorder to answer for the whole fleet. Package top/redis implements
// it.
type Peers interface {
	Peers(ctx context.Context) ([]*Snapshot, error)
}

// Options configure a Recorder. The zero value works: a capacity of
// DefaultCapacity, the wall clock, and answers for this instance alone.
type Options struct {
	// Capacity is K, the counters of each summary; 0 means
	// DefaultCapacity.
	Capacity int
	// Now is the clock that queries and snapshots are answered at; nil
	// means time.Now. Decisions carry their own time.
	Now func() time.Time
	// Instance names this instance in its snapshots; "" means a random
	// name.
	Instance string
	// Peers, when set, makes Top and Rules answer for the fleet, merging
	// the snapshots it gives with this instance's.
	Peers Peers
	// Logger hears about peers that could not be read; nil discards.
	Logger *slog.Logger
}

// Recorder keeps the heavy-hitter summaries of every rule identity. It
// is safe for concurrent use.
type Recorder struct {
	k        int
	now      func() time.Time
	start    time.Time
	instance string
	peers    Peers
	log      *slog.Logger

	mu    sync.Mutex
	rules map[RuleID]*Rule
}

// New returns a Recorder.
func New(opts Options) (*Recorder, error) {
	k := opts.Capacity
	switch {
	case k == 0:
		k = DefaultCapacity
	case k < 0 || k > MaxCapacity:
		return nil, fmt.Errorf("top: capacity %d is not between 1 and %d", k, MaxCapacity)
	}
	r := &Recorder{k: k, now: opts.Now, instance: opts.Instance, peers: opts.Peers, log: opts.Logger, rules: make(map[RuleID]*Rule)}
	if r.now == nil {
		r.now = time.Now
	}
	if r.instance == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		r.instance = hex.EncodeToString(b[:])
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.log = r.log.With("component", "top")
	r.start = r.now()
	return r, nil
}

// Capacity returns K, the counters of each summary.
func (r *Recorder) Capacity() int { return r.k }

// Instance returns the name of this instance's snapshots.
func (r *Recorder) Instance() string { return r.instance }

// Rule returns the recorder of one rule identity, limit being the limit
// that decides it (nil for an override), whose requests per unit and
// period Rules reports. The engine asks once per identity and rule set,
// and keeps what it gets for the rule set's life.
func (r *Recorder) Rule(domain, rule, limit string, lim *descriptor.Limit) *Rule {
	id := RuleID{Domain: domain, Rule: rule, Limit: limit}
	r.mu.Lock()
	h := r.rules[id]
	if h == nil {
		h = &Rule{rec: r, id: id, ring: ring{k: r.k}}
		r.rules[id] = h
	}
	r.mu.Unlock()
	h.mu.Lock()
	if lim != nil {
		h.rpu, h.period = lim.RequestsPerUnit, lim.Period()
	}
	h.mu.Unlock()
	return h
}

// Record counts one decision of the rule identity (domain, rule, limit);
// see Rule and Rule.Observe.
func (r *Recorder) Record(now time.Time, domain, rule, limit string, lim *descriptor.Limit, entries []descriptor.Entry, hits uint64, rejected bool) {
	r.Rule(domain, rule, limit, lim).Observe(now, entries, hits, rejected)
}

// Rule records the decisions of one rule identity.
type Rule struct {
	rec *Recorder
	id  RuleID

	mu         sync.Mutex
	rpu        uint32
	period     time.Duration
	ring       ring
	detached   bool  // swept from the recorder for idleness
	forwarding *Rule // the identity's Rule since, when detached
}

// maxStackKey is the longest encoded value Observe encodes without
// allocating.
const maxStackKey = 128

// Observe counts a decision made at now for the descriptor entries:
// hits more requests and, if rejected, hits more rejections (rejected is
// an answer of OVER_LIMIT, or one that shadow mode turned into OK).
// Observe keeps nothing of entries unless the value takes a counter,
// and then a copy; it does not allocate otherwise unless the entries
// encode in more than 128 bytes. A decision of 0 hits (a check) counts
// nothing.
func (h *Rule) Observe(now time.Time, entries []descriptor.Entry, hits uint64, rejected bool) {
	if hits == 0 {
		return
	}
	var stack [maxStackKey]byte
	h.observe(slotOf(now), appendEntries(stack[:0], entries), hits, rejected)
}

func (h *Rule) observe(slot int64, key []byte, hits uint64, rejected bool) {
	h.mu.Lock()
	if h.detached {
		h.mu.Unlock()
		h.rec.reattach(h).observe(slot, key, hits, rejected)
		return
	}
	h.ring.advance(slot)
	h.ring.record(key, hits, rejected)
	h.mu.Unlock()
}

// reattach returns the Rule that records h's identity, putting h back
// in the recorder unless a newer one took its place.
func (r *Recorder) reattach(h *Rule) *Rule {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.detached {
		return h
	}
	if h.forwarding != nil {
		return h.forwarding
	}
	if cur := r.rules[h.id]; cur != nil {
		h.forwarding = cur
		return cur
	}
	h.detached = false
	r.rules[h.id] = h
	return h
}

// numWindows is the number of Windows.
const numWindows = 3

// Window is the span of time a query covers.
type Window uint8

// The windows. Each covers at least its length and at most one step of
// its intervals more: 10 s for Minute, a minute for FiveMinutes and 5
// minutes for Hour.
const (
	FiveMinutes Window = iota // the default
	Minute
	Hour
)

var windowNames = [numWindows]string{FiveMinutes: "5m", Minute: "1m", Hour: "1h"}

// String returns "1m", "5m" or "1h".
func (w Window) String() string {
	if w >= numWindows {
		return fmt.Sprintf("window(%d)", uint8(w))
	}
	return windowNames[w]
}

// Length returns the nominal length of w.
func (w Window) Length() time.Duration {
	switch w {
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	}
	return 5 * time.Minute
}

// ErrInvalidQuery reports a query that cannot be answered; errors that
// wrap it say what is wrong.
var ErrInvalidQuery = errors.New("invalid query")

// ParseWindow returns the window named "1m", "5m" or "1h"; "" is
// FiveMinutes.
func ParseWindow(s string) (Window, error) {
	if s == "" {
		return FiveMinutes, nil
	}
	for w, name := range windowNames {
		if s == name {
			return Window(w), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown window %q (want 1m, 5m or 1h)", ErrInvalidQuery, s)
}

// By is the count entries are sorted by.
type By uint8

// The orders.
const (
	ByRejected By = iota // the default
	ByRequests
)

// String returns "rejected" or "requests".
func (b By) String() string {
	switch b {
	case ByRejected:
		return "rejected"
	case ByRequests:
		return "requests"
	}
	return fmt.Sprintf("by(%d)", uint8(b))
}

// ParseBy returns the order named "rejected" or "requests"; "" is
// ByRejected.
func ParseBy(s string) (By, error) {
	switch s {
	case "", "rejected":
		return ByRejected, nil
	case "requests":
		return ByRequests, nil
	}
	return 0, fmt.Errorf("%w: unknown order %q (want rejected or requests)", ErrInvalidQuery, s)
}
