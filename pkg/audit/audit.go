// Package audit records who changed what in a running tollgate: every
// change made through the admin API (an override created or deleted, a
// counter reset) and every reload that changed the descriptor
// configuration.
//
// A Log writes each entry at once as one record to a logger of its own,
// which the application points at a JSON-lines file or stderr, and keeps
// the latest entries in memory for GET /v1/audit. The file is the record
// that survives a restart; the memory copy is bounded and per instance.
//
// An entry names its actor by the admin token's name, never the token, and
// holds only what the caller gave it: callers must not put secrets in
// Before, After or Reason.
package audit

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultSize is how many entries a Log keeps in memory when Options.Size
// is zero.
const DefaultSize = 1000

// The actions tollgate records.
const (
	ActionOverrideCreate = "override.create"
	ActionOverrideDelete = "override.delete"
	// ActionOverrideLearn is an override this instance found in the
	// store, made elsewhere.
	ActionOverrideLearn = "override.learn"
	ActionReset         = "reset"
	ActionReload        = "reload"
	// ActionRecordStart and ActionRecordStop start and stop a traffic
	// recording.
	ActionRecordStart = "record.start"
	ActionRecordStop  = "record.stop"
)

// Entry is one audited change.
type Entry struct {
	Time time.Time `json:"time"`
	// Actor names who made the change: an admin token's name, "reload"
	// for a configuration reload, or "store" for an override learned from
	// the store.
	Actor  string `json:"actor"`
	Action string `json:"action"`
	// Target names what changed, such as an override's id or a domain.
	Target string `json:"target,omitempty"`
	// Before and After are the state before and after the change; either
	// is nil when there was none (nothing before a create, nothing after a
	// delete). They are encoded as JSON.
	Before any    `json:"before,omitempty"`
	After  any    `json:"after,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Options configure a Log. The zero value keeps DefaultSize entries and
// writes them nowhere else.
type Options struct {
	// Logger receives every entry as one record at level INFO with the
	// message "audit". Give it a handler of its own, such as a
	// slog.JSONHandler on the audit file: the entries are the whole of what
	// it writes. Nil writes nothing.
	Logger *slog.Logger
	// Size bounds the entries kept in memory, the newest kept; zero means
	// DefaultSize.
	Size int
	// Now stamps entries that have no Time; nil means time.Now.
	Now func() time.Time
}

// Log records audit entries. It is safe for concurrent use.
type Log struct {
	logger *slog.Logger
	now    func() time.Time

	mu sync.Mutex
	// ring holds the newest entries; next is where the next one goes, and
	// full is set once the ring has wrapped.
	ring []Entry
	next int
	full bool
}

// New returns an empty Log.
func New(opts Options) *Log {
	if opts.Size <= 0 {
		opts.Size = DefaultSize
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Log{logger: opts.Logger, now: opts.Now, ring: make([]Entry, opts.Size)}
}

// Record appends e, stamped with the current time if it has none, and
// writes it to the logger. Records are kept and written under one lock,
// so the log's lines come in the order Last returns them: audits are
// rare, and their order is the point.
func (l *Log) Record(ctx context.Context, e Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.Time.IsZero() {
		e.Time = l.now()
	}
	e.Time = e.Time.UTC()
	l.ring[l.next] = e
	l.next++
	if l.next == len(l.ring) {
		l.next, l.full = 0, true
	}

	attrs := []slog.Attr{
		slog.Time("at", e.Time),
		slog.String("actor", e.Actor),
		slog.String("action", e.Action),
	}
	if e.Target != "" {
		attrs = append(attrs, slog.String("target", e.Target))
	}
	if e.Before != nil {
		attrs = append(attrs, slog.Any("before", e.Before))
	}
	if e.After != nil {
		attrs = append(attrs, slog.Any("after", e.After))
	}
	if e.Reason != "" {
		attrs = append(attrs, slog.String("reason", e.Reason))
	}
	l.logger.LogAttrs(ctx, slog.LevelInfo, "audit", attrs...)
}

// Last returns the newest n entries kept, oldest first; all of them when n
// is zero or more than are kept.
func (l *Log) Last(n int) []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	kept := l.next
	if l.full {
		kept = len(l.ring)
	}
	if n <= 0 || n > kept {
		n = kept
	}
	out := make([]Entry, n)
	// The newest entry is at next-1; the oldest wanted n before it.
	start := l.next - n
	if start < 0 {
		start += len(l.ring)
	}
	for i := range out {
		out[i] = l.ring[(start+i)%len(l.ring)]
	}
	return out
}
