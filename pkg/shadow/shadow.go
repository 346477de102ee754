package shadow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/top"
)

// DefaultQueue is the number of calls waiting to be decided when
// Options.Queue is 0.
const DefaultQueue = 8192

const meterName = "github.com/tollgatehq/tollgate/pkg/shadow"

// The label values where there is no domain, rule or limit to name, as
// tollgate_decisions_total has them.
const (
	unknownDomain = "(unknown)"
	overrideLimit = "(override)"
)

// maxLabelSets bounds the attribute sets a Set keeps.
const maxLabelSets = 1 << 14

// maxPooledEntries bounds the entries of a call buffer kept for reuse.
const maxPooledEntries = 4096

// Options configure a Set. Tree is required.
type Options struct {
	// Tree returns the shadow rules' current tree, such as a
	// reload.Reloader's Current. Calls decided while it returns nil are
	// not counted.
	Tree func() *descriptor.Tree
	// Engine is the live engine's options. The shadow engine takes their
	// policy and nothing else: ShadowMode, the defaults, the request
	// bounds and Overrides. Its store, tree, clock, observer and
	// instruments are its own; it records nothing, adds no headers and
	// waits on nothing.
	Engine limiter.Options
	// MaxKeys bounds the counters of the shadow set's memory store; 0
	// means the memory store's default.
	MaxKeys int
	// Top, when set, hears every descriptor the shadow rules decide by a
	// limit, as the live top.Recorder hears the live ones.
	Top *top.Recorder
	// Queue bounds the calls waiting to be decided; 0 means DefaultQueue.
	Queue int
	// Logger is the shadow engine's; nil discards.
	Logger *slog.Logger
	// MeterProvider provides the tollgate_shadow_* instruments; nil means
	// none.
	MeterProvider metric.MeterProvider
}

// Status counts the calls a Set has heard.
type Status struct {
	// Decided counts the calls decided under the shadow rules, Dropped
	// those the queue had no room for.
	Decided int64 `json:"decided"`
	Dropped int64 `json:"dropped"`
}

// Set decides live calls again under a shadow rule set; it is a
// limiter.Recorder. Record is safe for concurrent use; Run decides what it
// queues.
type Set struct {
	tree  func() *descriptor.Tree
	lim   *limiter.Limiter
	queue chan *call
	calls sync.Pool // *call

	// now is the instant the call being decided was decided live, and cur
	// the shadow tree it is decided under: the shadow engine's clock and
	// tree. Only Run's goroutine touches them.
	now time.Time
	cur *descriptor.Tree

	// labels caches the attribute sets of tollgate_shadow_decisions and
	// differences the attribute sets of tollgate_shadow_differences, by
	// label values; only Run's goroutine touches them.
	labels      map[labelKey][]metric.AddOption
	differences map[diffKey][]metric.AddOption

	decisionsCounter   metric.Int64Counter
	differencesCounter metric.Int64Counter
	droppedCounter     metric.Int64Counter

	started atomic.Bool
	decided atomic.Int64
	dropped atomic.Int64
}

var _ limiter.Recorder = (*Set)(nil)

// labelKey is the labels of one series of tollgate_shadow_decisions.
type labelKey struct {
	domain, rule, limit, result string
}

// diffKey is the labels of one series of tollgate_shadow_differences.
type diffKey struct {
	domain string
	// rejected: newly_rejected, else newly_admitted.
	rejected bool
}

// New returns a Set that decides nothing until Run runs.
func New(opts Options) (*Set, error) {
	if opts.Tree == nil {
		return nil, errors.New("shadow: no descriptor tree")
	}
	if opts.Queue < 0 {
		return nil, fmt.Errorf("shadow: negative queue %d", opts.Queue)
	}
	if opts.Queue == 0 {
		opts.Queue = DefaultQueue
	}
	s := &Set{
		tree:        opts.Tree,
		queue:       make(chan *call, opts.Queue),
		labels:      make(map[labelKey][]metric.AddOption),
		differences: make(map[diffKey][]metric.AddOption),
	}
	s.calls.New = func() any { return new(call) }
	now := func() time.Time { return s.now }
	e := opts.Engine
	engine := limiter.Options{
		Store:              memory.New(memory.Options{MaxKeys: opts.MaxKeys, Now: now}),
		Tree:               func() *descriptor.Tree { return s.cur },
		Overrides:          e.Overrides,
		ShadowMode:         e.ShadowMode,
		DefaultAlgorithm:   e.DefaultAlgorithm,
		DefaultCharge:      e.DefaultCharge,
		DefaultFailureMode: e.DefaultFailureMode,
		MaxDescriptors:     e.MaxDescriptors,
		MaxEntries:         e.MaxEntries,
		MaxKeyLen:          e.MaxKeyLen,
		MaxValueLen:        e.MaxValueLen,
		MaxHits:            e.MaxHits,
		Now:                now,
		// The live engine's instruments are the live engine's: the
		// shadow one counts through this package's.
		MeterProvider: noop.NewMeterProvider(),
	}
	if opts.Logger != nil {
		engine.Logger = opts.Logger.With("set", "shadow")
	}
	if opts.Top != nil {
		engine.Observer = topObserver{opts.Top}
	}
	var err error
	if s.lim, err = limiter.New(engine); err != nil {
		return nil, fmt.Errorf("shadow: %w", err)
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter(meterName)
	if s.decisionsCounter, err = meter.Int64Counter("tollgate_shadow_decisions",
		metric.WithDescription("Descriptors decided again under the shadow rules, by domain, rule, limit name and what the shadow rules would have answered."),
		metric.WithUnit("{descriptor}")); err != nil {
		return nil, fmt.Errorf("shadow: creating instruments: %w", err)
	}
	if s.differencesCounter, err = meter.Int64Counter("tollgate_shadow_differences",
		metric.WithDescription("Calls whose overall code the shadow rules would change: newly_rejected or newly_admitted."),
		metric.WithUnit("{call}")); err != nil {
		return nil, fmt.Errorf("shadow: creating instruments: %w", err)
	}
	if s.droppedCounter, err = meter.Int64Counter("tollgate_shadow_dropped",
		metric.WithDescription("Calls not decided under the shadow rules because the queue to them was full."),
		metric.WithUnit("{call}")); err != nil {
		return nil, fmt.Errorf("shadow: creating instruments: %w", err)
	}
	return s, nil
}

// Status returns how many calls were decided and dropped.
func (s *Set) Status() Status {
	return Status{Decided: s.decided.Load(), Dropped: s.dropped.Load()}
}

// Record offers a decided call to the queue, or counts it dropped when
// the queue is full; see limiter.Recorder. It never blocks.
func (s *Set) Record(now time.Time, dom *descriptor.Domain, req *limiter.Request, resp *limiter.Response) {
	c := s.calls.Get().(*call)
	c.fill(now, dom != nil, req, resp.Code)
	select {
	case s.queue <- c:
	default:
		s.dropped.Add(1)
		s.droppedCounter.Add(context.Background(), 1)
		s.recycle(c)
	}
}

// Run decides the queued calls under the shadow rules until ctx ends,
// then returns nil; the calls still queued are left undecided. Run may be
// called once.
func (s *Set) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("shadow: Run called more than once")
	}
	var resp limiter.Response
	for {
		select {
		case <-ctx.Done():
			return nil
		case c := <-s.queue:
			s.decide(c, &resp)
			s.recycle(c)
		}
	}
}

// decide decides c under the current shadow rules and counts the answer.
func (s *Set) decide(c *call, resp *limiter.Response) {
	s.now, s.cur = c.now, s.tree()
	ctx := context.Background()
	if err := s.lim.CheckInto(ctx, &c.req, resp); err != nil {
		// No shadow rules yet; the live engine refused what the shadow
		// one would, with the same bounds.
		return
	}
	s.decided.Add(1)
	domain := c.req.Domain
	if !c.liveKnown && s.cur.Domain(domain) == nil {
		domain = unknownDomain
	}
	for i := range resp.Statuses {
		s.decisionsCounter.Add(ctx, 1, s.labelsOf(domain, &resp.Statuses[i])...)
	}
	if resp.Code != c.live {
		s.differencesCounter.Add(ctx, 1, s.differenceOf(domain, resp.Code == limiter.OverLimit)...)
	}
}

// labelsOf returns the attribute set of tollgate_shadow_decisions for
// st, a status of a call of domain (as labelled), as the options of Add:
// a slice kept, so that counting allocates nothing.
func (s *Set) labelsOf(domain string, st *limiter.Status) []metric.AddOption {
	k := labelKey{domain: domain, result: "ok"}
	if st.Rule != nil {
		k.rule = st.Rule.Path
	}
	if st.Limit != nil {
		k.limit = st.Limit.Name
		if st.Rule == nil || !ownLimit(st.Rule, st.Limit) {
			k.limit = overrideLimit
		}
	}
	switch {
	case st.Code == limiter.OverLimit:
		k.result = "over_limit"
	case st.Rule == nil && st.Limit == nil:
		k.result = "unmatched"
	}
	if opt, ok := s.labels[k]; ok {
		return opt
	}
	opt := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
		attribute.String("domain", k.domain), attribute.String("rule", k.rule),
		attribute.String("limit", k.limit), attribute.String("result", k.result)))}
	if len(s.labels) < maxLabelSets {
		s.labels[k] = opt
	}
	return opt
}

// differenceOf returns the attribute set of tollgate_shadow_differences
// for a call of domain that the shadow rules newly reject, or newly
// admit, as labelsOf returns them.
func (s *Set) differenceOf(domain string, rejected bool) []metric.AddOption {
	k := diffKey{domain: domain, rejected: rejected}
	if opt, ok := s.differences[k]; ok {
		return opt
	}
	change := "newly_admitted"
	if rejected {
		change = "newly_rejected"
	}
	opt := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("domain", domain), attribute.String("change", change)))}
	if len(s.differences) < maxLabelSets {
		s.differences[k] = opt
	}
	return opt
}

// ownLimit reports whether lim is one of rule's own limits, not an
// override's.
func ownLimit(rule *descriptor.Rule, lim *descriptor.Limit) bool {
	for i := range rule.Limits {
		if &rule.Limits[i] == lim {
			return true
		}
	}
	return false
}

// recycle gives c's buffers back to the pool, unless they grew large.
func (s *Set) recycle(c *call) {
	if cap(c.entries) <= maxPooledEntries && cap(c.descs) <= maxPooledEntries {
		s.calls.Put(c)
	}
}

// call is a decided call, copied for the shadow engine.
type call struct {
	now time.Time
	// liveKnown is set when the live rules know the domain; live is the
	// overall code the call was answered.
	liveKnown bool
	live      limiter.Code
	req       limiter.Request

	// The storage of req's descriptors, their entries and Envoy's limit
	// overrides, reused from call to call.
	descs     []limiter.Descriptor
	entries   []descriptor.Entry
	overrides []limiter.Override
}

// fill copies req, decided at now and answered live, into c. Strings are
// immutable, so they are shared; slices and overrides are copied, since
// req belongs to its caller.
func (c *call) fill(now time.Time, liveKnown bool, req *limiter.Request, live limiter.Code) {
	c.now, c.liveKnown, c.live = now, liveKnown, live
	entries, overrides := 0, 0
	for i := range req.Descriptors {
		entries += len(req.Descriptors[i].Entries)
		if req.Descriptors[i].Override != nil {
			overrides++
		}
	}
	// Grown first, so that the slices into them stay valid.
	c.entries = slices.Grow(c.entries[:0], entries)
	c.overrides = slices.Grow(c.overrides[:0], overrides)
	c.descs = c.descs[:0]
	for i := range req.Descriptors {
		d := req.Descriptors[i]
		from := len(c.entries)
		c.entries = append(c.entries, d.Entries...)
		d.Entries = c.entries[from:len(c.entries):len(c.entries)]
		if d.Override != nil {
			c.overrides = append(c.overrides, *d.Override)
			d.Override = &c.overrides[len(c.overrides)-1]
		}
		c.descs = append(c.descs, d)
	}
	// The live engine accepted the call from its source: its charge
	// markers and refunds stand.
	c.req = limiter.Request{Domain: req.Domain, Descriptors: c.descs, Hits: req.Hits}
}

// topObserver lets the shadow engine tell the shadow set's top clients
// about every decision.
type topObserver struct{ rec *top.Recorder }

func (o topObserver) Rule(domain, rule, limit string, lim *descriptor.Limit) limiter.RuleObserver {
	return o.rec.Rule(domain, rule, limit, lim)
}
