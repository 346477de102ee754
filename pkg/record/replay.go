package record

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
)

// DefaultReplayKeys bounds the counters of each rule set a replay
// decides with when ReplayOptions.MaxKeys is 0: more than a recording of
// a few million clients holds, so that none is evicted, each costing a
// few hundred bytes.
const DefaultReplayKeys = 1 << 24

// DefaultTop is the number of clients a Report lists per rule when
// ReplayOptions.Top is 0.
const DefaultTop = 10

// ReplayOptions configure Replay. Rules is required.
type ReplayOptions struct {
	// Rules is the rule set replayed: the "after" of the report.
	Rules *descriptor.Tree
	// Baseline, when set, is replayed beside Rules as the "before";
	// nil takes the recorded verdicts as the before.
	Baseline *descriptor.Tree
	// Engine holds the engine's settings, as serve's give them: request
	// bounds, shadow mode, the defaults of Envoy's limit overrides. Its
	// store, rules, overrides, clock, hooks and telemetry are the
	// replay's own.
	Engine limiter.Options
	// Scale replays the traffic Scale times as dense: the time from the
	// first call to each one is divided by it. 0 means 1.
	Scale float64
	// Top is the number of clients listed per rule; 0 means DefaultTop.
	Top int
	// MaxKeys bounds the counters of each rule set's memory store; 0
	// means DefaultReplayKeys.
	MaxKeys int
}

// Input is one file of a recording.
type Input struct {
	Name string
	R    io.Reader
}

// Replay decides the calls of a recording again, through opts.Rules and
// opts.Baseline (or against the recorded verdicts), each on a memory
// store of its own, on a virtual clock that follows the recorded times,
// applying the recorded overrides as they changed, and reports what
// changed, per rule. The inputs may be given in any order: they are
// replayed in the order of their headers' start times, so a recording
// and its rotated PATH.1 replay as one. A malformed input is an error
// that names it and the line; calls that the engine refuses under
// opts.Engine's request bounds are counted in Report.Refused and
// skipped.
func Replay(ctx context.Context, inputs []Input, opts ReplayOptions) (*Report, error) {
	rp, err := newReplayer(opts)
	if err != nil {
		return nil, err
	}
	files, err := openInputs(inputs)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan batch, 4)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { read(ctx, files, batches) })
	for b := range batches {
		if b.begins {
			rp.begin(b.file)
		}
		for i := range b.lines {
			if err := rp.line(b.file, &b.lines[i]); err != nil {
				return nil, err
			}
		}
		if b.err != nil {
			return nil, b.err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return rp.report(time.Since(start)), nil
}

// inputFile is an input whose header is read.
type inputFile struct {
	name   string
	r      *Reader
	header *Header
}

// openInputs reads the header of every input and orders them by start.
func openInputs(inputs []Input) ([]inputFile, error) {
	if len(inputs) == 0 {
		return nil, errors.New("replay: no recording to replay")
	}
	files := make([]inputFile, len(inputs))
	for i, in := range inputs {
		r := NewReader(in.R)
		if _, err := r.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("line 1: no header: %w", ErrFormat)
			}
			return nil, fmt.Errorf("%s: %w", in.Name, err)
		}
		files[i] = inputFile{name: in.Name, r: r, header: r.Header()}
	}
	slices.SortStableFunc(files, func(a, b inputFile) int { return a.header.Start.Compare(b.header.Start) })
	return files, nil
}

// ruleSet is a rule set being replayed, on its own memory store.
type ruleSet struct {
	tree *descriptor.Tree
	lim  *limiter.Limiter
	resp limiter.Response
	// reproduces is set when the set is the one the recording was made
	// under, so that its verdicts are checked against the recorded ones.
	reproduces bool
}

// replayer is one Replay's state.
type replayer struct {
	opts     ReplayOptions
	after    *ruleSet
	before   *ruleSet // nil: the recorded verdicts
	now      time.Time
	scale    float64
	first    int64 // the first call's recorded time, µs; 0 before it
	overSet  *override.Set
	live     map[string]override.Override
	overDirt bool // live changed since overSet was built
	key      string
	req      limiter.Request
	envoy    []limiter.Override

	rep      Report
	rows     map[ruleKey]*ruleRow
	recorded string
	began    time.Time // the earliest header's start
}

// ruleKey names a rule across rule sets: its domain and path.
type ruleKey struct{ domain, rule string }

// ruleRow is a RuleReport being counted, with every client's counts.
type ruleRow struct {
	RuleReport
	rejected, admitted map[string]int64
}

func newReplayer(opts ReplayOptions) (*replayer, error) {
	if opts.Rules == nil {
		return nil, errors.New("replay: no rules")
	}
	if !(opts.Scale >= 0) || opts.Scale > 1e6 {
		return nil, fmt.Errorf("replay: scale %v is not in (0, 1e6]", opts.Scale)
	}
	if opts.Scale == 0 {
		opts.Scale = 1
	}
	if opts.Top <= 0 {
		opts.Top = DefaultTop
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultReplayKeys
	}
	rp := &replayer{opts: opts, scale: opts.Scale, live: map[string]override.Override{}, rows: map[ruleKey]*ruleRow{}}
	var err error
	if rp.after, err = rp.ruleSet(opts.Rules); err != nil {
		return nil, err
	}
	if opts.Baseline != nil {
		if rp.before, err = rp.ruleSet(opts.Baseline); err != nil {
			return nil, err
		}
	}
	rp.rep = Report{RulesHash: opts.Rules.Hash(), Baseline: BaselineRecorded, Scale: opts.Scale}
	if opts.Baseline != nil {
		rp.rep.Baseline, rp.rep.BaselineHash = BaselineReplayed, opts.Baseline.Hash()
	}
	return rp, nil
}

// ruleSet builds the engine that replays tree.
func (rp *replayer) ruleSet(tree *descriptor.Tree) (*ruleSet, error) {
	clock := func() time.Time { return rp.now }
	o := rp.opts.Engine
	o.Store = memory.New(memory.Options{MaxKeys: rp.opts.MaxKeys, Now: clock})
	o.Tree = func() *descriptor.Tree { return tree }
	o.Overrides = func() *override.Set { return rp.overrides() }
	o.Now = clock
	o.StoreTimeout, o.Fallback, o.OnReset, o.Observer, o.Recorder = 0, nil, nil, nil, nil
	o.Logger, o.MeterProvider, o.TracerProvider = nil, nil, nil
	lim, err := limiter.New(o)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return &ruleSet{tree: tree, lim: lim}, nil
}

// overrides returns the set of the overrides live in the replay.
func (rp *replayer) overrides() *override.Set {
	if rp.overDirt {
		list := make([]override.Override, 0, len(rp.live))
		for _, o := range rp.live {
			list = append(list, o)
		}
		rp.overSet, rp.overDirt = override.NewSet(list), false
	}
	return rp.overSet
}

// batchLines is the number of decoded lines handed over at once.
const batchLines = 256

// batch is decoded lines of one file, or its beginning; err ends the
// reading.
type batch struct {
	file   *inputFile
	begins bool
	lines  []Line
	err    error
}

// read decodes the lines of files in order, beside the decisions, and
// hands them over in batches to out, which it closes at the end or when
// ctx ends.
func read(ctx context.Context, files []inputFile, out chan<- batch) {
	defer close(out)
	send := func(b batch) bool {
		select {
		case out <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for i := range files {
		f := &files[i]
		if !send(batch{file: f, begins: true}) {
			return
		}
		lines := make([]Line, 0, batchLines)
		for {
			l, err := f.r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				send(batch{file: f, lines: lines, err: fmt.Errorf("%s: %w", f.name, err)})
				return
			}
			if lines = append(lines, l); len(lines) == batchLines {
				if !send(batch{file: f, lines: lines}) {
					return
				}
				lines = make([]Line, 0, batchLines)
			}
		}
		if len(lines) > 0 && !send(batch{file: f, lines: lines}) {
			return
		}
	}
}

// begin starts replaying the lines of a file: its header's overrides are
// those live.
func (rp *replayer) begin(f *inputFile) {
	h := f.header
	rp.key = h.Key
	if rp.recorded == "" {
		rp.recorded, rp.began = h.RulesHash, h.Start
		rp.rep.RecordedHash = h.RulesHash
		rp.after.reproduces = rp.scale == 1 && h.RulesHash != "" && h.RulesHash == rp.after.tree.Hash()
		if rp.before != nil {
			rp.before.reproduces = rp.scale == 1 && h.RulesHash != "" && h.RulesHash == rp.before.tree.Hash()
		}
	} else if h.RulesHash != rp.recorded {
		rp.rep.RulesChanged = true
	}
	if rp.rep.Sample == 0 || h.Sample < rp.rep.Sample {
		rp.rep.Sample = h.Sample
	}
	clear(rp.live)
	for _, o := range h.Overrides {
		rp.live[o.ID] = o
	}
	rp.overDirt = true
}

// line replays one line of f.
func (rp *replayer) line(f *inputFile, l *Line) error {
	switch {
	case l.Call != nil:
		if err := rp.call(l.Call); err != nil {
			return fmt.Errorf("%s: line %d: %w", f.name, l.Number, err)
		}
	case l.Override != nil:
		switch l.Override.Change {
		case ChangeCreated:
			rp.live[l.Override.Override.ID] = l.Override.Override
		case ChangeDeleted:
			delete(rp.live, l.Override.Override.ID)
		}
		rp.overDirt = true
	}
	return nil
}

// at returns the replay's instant of a recorded time.
func (rp *replayer) at(t int64) time.Time {
	if rp.first == 0 {
		rp.first = t
	}
	if rp.scale != 1 {
		t = rp.first + int64(float64(t-rp.first)/rp.scale)
	}
	return time.UnixMicro(t)
}

// call replays one call through the rule sets and counts the outcome.
func (rp *replayer) call(c *Call) error {
	rp.now = rp.at(c.Time)
	if rp.rep.From.IsZero() || time.UnixMicro(c.Time).Before(rp.rep.From) {
		rp.rep.From = time.UnixMicro(c.Time)
	}
	if to := time.UnixMicro(c.Time); to.After(rp.rep.To) {
		rp.rep.To = to
	}
	rp.request(c)
	if err := rp.decide(rp.after); err != nil {
		return rp.refused(err)
	}
	if rp.before != nil {
		if err := rp.decide(rp.before); err != nil {
			return rp.refused(err)
		}
	}
	rp.rep.Calls++
	after := rp.after.resp.Code == limiter.OverLimit
	before := c.Code == limiter.OverLimit.String()
	if rp.before != nil {
		before = rp.before.resp.Code == limiter.OverLimit
	}
	rp.rep.RejectedBefore += b2i(before)
	rp.rep.RejectedAfter += b2i(after)
	rp.rep.NewlyRejected += b2i(after && !before)
	rp.rep.NewlyAdmitted += b2i(before && !after)

	client, named := "", false
	for i := range c.Descriptors {
		d := &c.Descriptors[i]
		a := &rp.after.resp.Statuses[i]
		bRule, bOver := d.Rule, d.Code == limiter.OverLimit.String()
		if rp.before != nil {
			b := &rp.before.resp.Statuses[i]
			bRule, bOver = rulePath(b), b.Code == limiter.OverLimit
		}
		aOver := a.Code == limiter.OverLimit
		rb, ra := rp.row(c.Domain, bRule), rp.row(c.Domain, rulePath(a))
		rb.RequestsBefore++
		rb.RejectedBefore += b2i(bOver)
		ra.Requests++
		ra.RejectedAfter += b2i(aOver)
		if aOver != bOver {
			if !named {
				client, named = Client(rp.key, rp.domain(c.Domain), &rp.req), true
			}
			if aOver {
				ra.NewlyRejected.Total++
				ra.rejected[client]++
			} else {
				rb.NewlyAdmitted.Total++
				rb.admitted[client]++
			}
		}
		for _, rs := range [...]*ruleSet{rp.after, rp.before} {
			if rs != nil && rs.reproduces {
				rp.reproduce(c, d, &rs.resp.Statuses[i])
			}
		}
	}
	return nil
}

// domain returns the domain of the call in the replayed rules.
func (rp *replayer) domain(name string) *descriptor.Domain {
	if d := rp.after.tree.Domain(name); d != nil {
		return d
	}
	if rp.before != nil {
		return rp.before.tree.Domain(name)
	}
	return nil
}

// refused counts a call the engine refused, or returns an error that
// ends the replay.
func (rp *replayer) refused(err error) error {
	if !errors.Is(err, limiter.ErrInvalidRequest) {
		return err
	}
	if rp.rep.Refused++; rp.rep.RefusedReason == "" {
		rp.rep.RefusedReason = err.Error()
	}
	return nil
}

// request fills rp.req with the call's request.
func (rp *replayer) request(c *Call) {
	rp.req.Domain, rp.req.Hits = c.Domain, c.Hits
	rp.req.Descriptors = slices.Grow(rp.req.Descriptors[:0], len(c.Descriptors))[:len(c.Descriptors)]
	rp.envoy = slices.Grow(rp.envoy[:0], len(c.Descriptors))[:len(c.Descriptors)]
	for i := range c.Descriptors {
		d := &c.Descriptors[i]
		rd := limiter.Descriptor{Entries: d.Entries, Refund: d.Refund}
		if d.Hits != nil {
			rd.Hits, rd.HasHits = *d.Hits, true
		}
		if o := d.Override; o != nil {
			unit, _ := descriptor.ParseUnit(o.Unit) // the Reader checked it
			rp.envoy[i] = limiter.Override{RequestsPerUnit: o.RequestsPerUnit, Unit: unit, UnitMultiplier: o.UnitMultiplier}
			rd.Override = &rp.envoy[i]
		}
		rp.req.Descriptors[i] = rd
	}
}

// decide decides rp.req through rs.
func (rp *replayer) decide(rs *ruleSet) error {
	rp.rep.Decisions++
	return rs.lim.CheckInto(context.Background(), &rp.req, &rs.resp)
}

// row returns the row of a rule, created empty.
func (rp *replayer) row(domain, rule string) *ruleRow {
	k := ruleKey{domain, rule}
	r := rp.rows[k]
	if r == nil {
		r = &ruleRow{RuleReport: RuleReport{Domain: domain, Rule: rule}, rejected: map[string]int64{}, admitted: map[string]int64{}}
		rp.rows[k] = r
	}
	return r
}

// rulePath returns the path of the rule that decided st, "" for none.
func rulePath(st *limiter.Status) string {
	if st.Rule == nil {
		return ""
	}
	return st.Rule.Path
}

// reproduce compares a replayed verdict with the recorded one of a rule
// set the recording was made under, and counts why they differ.
func (rp *replayer) reproduce(c *Call, d *Descriptor, st *limiter.Status) {
	r := &rp.rep.Reproduction
	r.Compared++
	over := st.Code == limiter.OverLimit
	if over == (d.Code == limiter.OverLimit.String()) && rulePath(st) == d.Rule {
		return
	}
	r.Differ++
	var why string
	switch {
	case rulePath(st) != d.Rule:
		why = ReasonRule
	case st.Limit != nil && time.UnixMicro(c.Time).Sub(rp.began) < st.Limit.Period():
		why = ReasonBefore
	case over:
		why = ReasonUncounted
	default:
		why = ReasonMissing
	}
	if r.Reasons == nil {
		r.Reasons = map[string]int64{}
	}
	r.Reasons[why]++
}

// report returns the finished report.
func (rp *replayer) report(elapsed time.Duration) *Report {
	rep := rp.rep
	rep.Elapsed = elapsed
	for _, r := range rp.rows {
		if r.Rule == "" && r.RejectedBefore == 0 && r.RejectedAfter == 0 {
			continue // descriptors no rule decided, admitted throughout
		}
		r.NewlyRejected.Clients, r.NewlyRejected.Top = len(r.rejected), topClients(r.rejected, rp.opts.Top)
		r.NewlyAdmitted.Clients, r.NewlyAdmitted.Top = len(r.admitted), topClients(r.admitted, rp.opts.Top)
		rep.Rules = append(rep.Rules, r.RuleReport)
	}
	slices.SortFunc(rep.Rules, func(a, b RuleReport) int {
		return cmp.Or(cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.Rule, b.Rule))
	})
	if rp.after.reproduces {
		rep.Reproduction.Set = "rules"
	} else if rp.before != nil && rp.before.reproduces {
		rep.Reproduction.Set = "baseline"
	}
	return &rep
}

// topClients returns the n clients of the largest counts, largest first,
// then by name.
func topClients(counts map[string]int64, n int) []ClientCount {
	out := make([]ClientCount, 0, len(counts))
	for c, k := range counts {
		out = append(out, ClientCount{Client: c, Count: k})
	}
	slices.SortFunc(out, func(a, b ClientCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Client, b.Client))
	})
	return out[:min(n, len(out))]
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
