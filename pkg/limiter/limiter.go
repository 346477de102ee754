package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// Unlimited is the Remaining reported for unlimited and allow-listed
// descriptors, as envoyproxy/ratelimit reports it.
const Unlimited = math.MaxUint32

// storeErrorLogInterval is the least time between two log lines about store
// errors; the errors in between are counted and reported with the next line.
const storeErrorLogInterval = 10 * time.Second

// DefaultDeadlineMargin is the default of Options.DeadlineMargin.
const DefaultDeadlineMargin = 2 * time.Millisecond

// The defaults of the request bounds in Options.
const (
	DefaultMaxDescriptors = 64
	DefaultMaxEntries     = 32
	DefaultMaxKeyLen      = 256
	DefaultMaxValueLen    = 4096
	// DefaultMaxHits is Envoy's own cap on hits_addend, so that a report
	// of the millions of tokens one long-context response uses passes.
	DefaultMaxHits = 1_000_000_000
)

// ChargeKey is the key of the descriptor entry that marks a descriptor's
// hits as charged always (algorithm.ChargeAlways) whatever its rule says:
// a raw Envoy configuration adds it, with value ChargeAlwaysValue, to the
// descriptor of a report sent after the response. The entry is removed
// before matching and before the counter is named, so a marked descriptor
// names the same rule and counter as the descriptor without it.
const ChargeKey = "tollgate.charge"

// ChargeAlwaysValue is the one value a ChargeKey entry may have.
const ChargeAlwaysValue = "always"

// closedRetryAfter is the Retry-After of a rule that fails closed when the
// store's error does not say when to retry: the circuit breaker has not
// opened, or is probing.
const closedRetryAfter = time.Second

// ErrInvalidRequest reports a request the engine cannot decide because it is
// malformed (no domain, no descriptors, a descriptor without entries, an
// entry without a key, an override without a valid unit) or exceeds the
// request bounds of Options (too many descriptors or entries, a domain, key
// or value too long, a hits_addend too large). Errors that wrap it name the
// offending descriptor and entry by index. The adapters answer it with
// gRPC InvalidArgument and HTTP 400.
var ErrInvalidRequest = errors.New("invalid rate-limit request")

// ErrUnavailable reports that the engine could not decide because its store
// could not; it is store.ErrUnavailable, so errors.Is matches either. Check
// itself does not return it, since every failure mode answers; the
// adapters map it, to gRPC Unavailable and HTTP 503, for checkers that do.
var ErrUnavailable = store.ErrUnavailable

// Options configures a Limiter. Store and Tree are required; every other
// field has a working zero value.
type Options struct {
	// Store counts hits.
	Store store.Store
	// Tree returns the current descriptor tree snapshot. It is called once
	// per request; a nil tree makes every domain unknown.
	Tree func() *descriptor.Tree
	// Overrides returns the current snapshot of the operators' live
	// overrides (override.Registry.Current), called once per request of a
	// known domain; nil, or a nil snapshot, means none.
	Overrides func() *override.Set
	// HeaderStyle chooses the rate-limit headers added to every answer. The
	// zero value, HeadersNone, adds none; Retry-After and the policy markers
	// are added whatever the style.
	HeaderStyle HeaderStyle
	// ShadowMode puts every rule in shadow mode: hits are counted, but every
	// answer is OK.
	ShadowMode bool
	// DefaultAlgorithm counts Envoy limit overrides whose descriptor matches
	// no counted rule. Zero means algorithm.TokenBucket.
	DefaultAlgorithm algorithm.Kind
	// DefaultCharge charges Envoy limit overrides whose descriptor matches
	// no counted rule; an override on a counted rule takes the charge of
	// the rule's first limit. The zero value is algorithm.ChargeAdmitted.
	DefaultCharge algorithm.Charge
	// DefaultFailureMode decides Envoy limit overrides whose descriptor
	// matches no rule when the store fails; rules carry their own.
	DefaultFailureMode descriptor.FailureMode
	// StoreTimeout bounds every store call: a call ends at the earlier of
	// now + StoreTimeout and the caller's deadline less DeadlineMargin, and
	// is then answered by the rules' failure modes. Zero passes the
	// caller's context as it is, for a store that never waits, such as the
	// memory store.
	StoreTimeout time.Duration
	// DeadlineMargin is the time kept from the caller's deadline to answer
	// in. Zero means DefaultDeadlineMargin.
	DeadlineMargin time.Duration
	// Fallback decides the rules whose failure mode is local while Store
	// fails, each limit divided by FallbackShare. Nil answers them as
	// failure mode open.
	Fallback store.Store
	// FallbackShare is the number of instances expected to share the load
	// while Store is down: the fallback enforces limit / FallbackShare (at
	// least 1 unless the limit is 0). Zero means 1.
	FallbackShare int
	// MaxDescriptors bounds the descriptors of one request; 0 means
	// DefaultMaxDescriptors.
	MaxDescriptors int
	// MaxEntries bounds the entries of one descriptor; 0 means
	// DefaultMaxEntries.
	MaxEntries int
	// MaxKeyLen bounds the bytes of the domain and of every entry key; 0
	// means DefaultMaxKeyLen.
	MaxKeyLen int
	// MaxValueLen bounds the bytes of every entry value; 0 means
	// DefaultMaxValueLen.
	MaxValueLen int
	// MaxHits bounds hits_addend, of the request and of each descriptor; 0
	// means DefaultMaxHits.
	MaxHits uint64
	// Now is the clock used for reset timestamps and latency; nil means
	// time.Now.
	Now func() time.Time
	// Logger receives store errors (at most one line per 10 seconds); nil
	// discards.
	Logger *slog.Logger
	// MeterProvider provides the tollgate_* instruments; nil means a no-op
	// provider.
	MeterProvider metric.MeterProvider
	// TracerProvider traces every decision and its store calls; nil means
	// no spans at all, at no cost.
	TracerProvider trace.TracerProvider
	// OnReset is called by Reset with the counters it cleared, once the
	// store has cleared them, so that other instances can be told; nil
	// tells no one. The counters are the caller's to keep.
	OnReset func(ctx context.Context, counters []store.Hit)
}

// Request is one rate-limit question: a domain and its descriptors.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// Hits is the request-level hits_addend; 0 means 1.
	Hits uint32
}

// Descriptor is one descriptor of a Request.
type Descriptor struct {
	// Entries are matched against the rules in order. An entry with key
	// ChargeKey is not matched or counted: it charges the descriptor's
	// hits always.
	Entries []descriptor.Entry
	// Hits is the descriptor-level hits_addend. It applies only when
	// HasHits is set, and then wins over Request.Hits; HasHits with Hits 0
	// checks the limit without consuming.
	Hits    uint64
	HasHits bool
	// Refund gives the hits back instead of consuming them
	// (is_negative_hits).
	Refund bool
	// Override is Envoy's per-descriptor limit override, or nil.
	Override *Override
}

// Override is Envoy's per-descriptor limit override. It replaces the limits
// of the matched rule.
type Override struct {
	RequestsPerUnit uint32
	Unit            descriptor.Unit
	// UnitMultiplier stretches the window ("5 per 5 minutes"); 0 means 1.
	UnitMultiplier uint32
}

// Code is the answer for a request or a descriptor. Its values are those of
// Envoy's RateLimitResponse.Code; an answer never holds the zero Code.
type Code uint8

// The codes.
const (
	OK        Code = 1
	OverLimit Code = 2
)

// String returns "OK" or "OVER_LIMIT".
func (c Code) String() string {
	switch c {
	case OK:
		return "OK"
	case OverLimit:
		return "OVER_LIMIT"
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Status is the answer for one descriptor.
type Status struct {
	Code Code
	// Penalized reports an OverLimit answer from a penalty's cooldown
	// (descriptor.Limit.Penalty): the client kept sending while told to
	// wait, and RetryAfter is the cooldown left.
	Penalized bool
	// Never reports an OverLimit answer that no wait would change: the
	// hit's cost exceeds the limit's whole capacity (Limit still shows
	// it).
	Never bool
	// Limit is the limit reported as Envoy's current_limit: the most
	// restrictive of the matched rule's limits, or the override. It is nil
	// when no counted limit applies, and points into the immutable tree:
	// callers must not modify it.
	Limit *descriptor.Limit
	// Remaining is how many more hits the limit admits now; Unlimited for
	// unlimited and allow-listed descriptors.
	Remaining uint32
	// ResetAfter is Envoy's duration_until_reset.
	ResetAfter time.Duration
	// RetryAfter is how long until the same hit would be admitted; zero
	// unless Code is OverLimit, and zero when Never is set.
	RetryAfter time.Duration
	// Rule is the rule that decided the descriptor: the matched rule whose
	// limits were counted (or, the store failing, answered by its failure
	// mode), or the unlimited, allow-list or deny-list rule that answered
	// without counting. It is nil when no rule decided: the descriptor
	// matched no rule or one without limits, an Envoy override decided it,
	// or every limit of its rule was replaced. It points into the immutable
	// tree: callers must not modify it.
	Rule *descriptor.Rule
}

// Header is one response header.
type Header struct {
	Key, Value string
}

// Response is the answer to a Request.
type Response struct {
	// Code is OverLimit when any descriptor not in quota mode is over its
	// limit, or when the request has quota-mode descriptors and all of them
	// are over; otherwise OK.
	Code Code
	// Statuses has one status per request descriptor, in request order.
	Statuses []Status
	// Headers go on the downstream response, on OK and on the 429 alike.
	Headers []Header
	// Body is the JSON body of a 429; nil unless Code is OverLimit.
	Body []byte
}

// Limiter decides rate-limit requests. It is safe for concurrent use.
type Limiter struct {
	store         store.Store
	tree          func() *descriptor.Tree
	overrides     func() *override.Set // nil: none
	style         HeaderStyle
	shadow        bool
	defaultAlgo   algorithm.Kind
	defaultCharge algorithm.Charge
	defaultFail   descriptor.FailureMode
	timeout       time.Duration // 0: none
	margin        time.Duration
	fallback      store.Store
	share         int64
	bounds        bounds
	now           func() time.Time
	since         func(time.Time) time.Duration // the time elapsed since one now returned
	log           *slog.Logger
	metrics       *metrics
	tracer        trace.Tracer // nil: no spans
	onReset       func(context.Context, []store.Hit)

	// labels caches metric attribute sets for the current tree.
	labels atomic.Pointer[labelCache]
	pool   sync.Pool // *scratch

	lastErrLog atomic.Int64 // Unix nanoseconds of the last store-error log line
	errsQuiet  atomic.Int64 // store errors not logged since then
}

// New returns a Limiter. It fails when Store or Tree is missing or the
// instruments cannot be created.
func New(opts Options) (*Limiter, error) {
	if opts.Store == nil {
		return nil, errors.New("limiter: no store")
	}
	if opts.Tree == nil {
		return nil, errors.New("limiter: no descriptor tree")
	}
	if opts.StoreTimeout < 0 {
		return nil, fmt.Errorf("limiter: negative store timeout %v", opts.StoreTimeout)
	}
	if opts.DeadlineMargin < 0 {
		return nil, fmt.Errorf("limiter: negative deadline margin %v", opts.DeadlineMargin)
	}
	if opts.DefaultCharge > algorithm.ChargeAlways {
		return nil, fmt.Errorf("limiter: unknown charge %d", opts.DefaultCharge)
	}
	if opts.DefaultFailureMode > descriptor.FailLocal {
		return nil, fmt.Errorf("limiter: unknown failure mode %d", opts.DefaultFailureMode)
	}
	if opts.FallbackShare < 0 {
		return nil, fmt.Errorf("limiter: negative fallback share %d", opts.FallbackShare)
	}
	if opts.HeaderStyle > HeadersIETF {
		return nil, fmt.Errorf("limiter: unknown header style %d", opts.HeaderStyle)
	}
	for _, b := range []struct {
		name string
		v    int
	}{
		{"descriptors", opts.MaxDescriptors},
		{"entries", opts.MaxEntries},
		{"key length", opts.MaxKeyLen},
		{"value length", opts.MaxValueLen},
	} {
		if b.v < 0 {
			return nil, fmt.Errorf("limiter: negative maximum %s %d", b.name, b.v)
		}
	}
	l := &Limiter{
		store:         opts.Store,
		tree:          opts.Tree,
		overrides:     opts.Overrides,
		style:         opts.HeaderStyle,
		shadow:        opts.ShadowMode,
		defaultAlgo:   opts.DefaultAlgorithm,
		defaultCharge: opts.DefaultCharge,
		defaultFail:   opts.DefaultFailureMode,
		timeout:       opts.StoreTimeout,
		margin:        opts.DeadlineMargin,
		fallback:      opts.Fallback,
		share:         int64(max(opts.FallbackShare, 1)),
		bounds: bounds{
			descriptors: orDefault(opts.MaxDescriptors, DefaultMaxDescriptors),
			entries:     orDefault(opts.MaxEntries, DefaultMaxEntries),
			keyLen:      orDefault(opts.MaxKeyLen, DefaultMaxKeyLen),
			valueLen:    orDefault(opts.MaxValueLen, DefaultMaxValueLen),
			hits:        orDefault(opts.MaxHits, DefaultMaxHits),
		},
		now:     opts.Now,
		log:     opts.Logger,
		onReset: opts.OnReset,
	}
	if l.margin == 0 {
		l.margin = DefaultDeadlineMargin
	}
	if l.defaultAlgo == 0 {
		l.defaultAlgo = algorithm.TokenBucket
	}
	if l.now == nil {
		// time.Since reads only the monotonic clock, half the cost of the
		// time.Now it equals.
		l.now, l.since = time.Now, time.Since
	} else {
		l.since = func(t time.Time) time.Duration { return l.now().Sub(t) }
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.log = l.log.With("component", "limiter")
	mp := opts.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m, err := newMetrics(mp)
	if err != nil {
		return nil, fmt.Errorf("limiter: creating instruments: %w", err)
	}
	l.metrics = m
	if opts.TracerProvider != nil {
		l.tracer = opts.TracerProvider.Tracer(tracerName)
	}
	l.pool.New = func() any { return new(scratch) }
	return l, nil
}

// kind is how a descriptor is decided.
type kind uint8

const (
	kindUnmatched kind = iota // no rule, or a rule without limits: OK, no limit
	kindUnlimited             // unlimited rule: OK, not counted
	kindAllow                 // allow list: OK, not counted
	kindDeny                  // deny list: OVER_LIMIT, not counted
	kindCounted               // one hit per limit
	kindReplaced              // every limit replaced by another descriptor's rule
)

// descState is the engine's working state for one descriptor.
type descState struct {
	kind     kind
	rule     *descriptor.Rule
	always   bool               // a ChargeKey entry charges every hit always
	plain    []descriptor.Entry // when always, the entries without ChargeKey
	charged  bool               // some hit is charged always
	limits   []descriptor.Limit // the rule's limits, or the one override
	override bool
	// admin is the operator's override that replaced limits, or nil.
	admin    *override.Live
	shadow   bool
	quota    bool
	firstHit int // index of the descriptor's first hit
	nHits    int
	local    bool // decided by the fallback store
}

// scratch holds the per-request working slices; Check takes one from a pool.
type scratch struct {
	descs    []descState
	hits     []store.Hit
	limits   []*descriptor.Limit // limits[i] is the limit of hits[i]
	verdicts []algorithm.Verdict
	entries  []store.Entry
	plain    []descriptor.Entry // the entries of marked descriptors, marker removed
	buf      []byte
	// The fallback's hits and verdicts, used only while the store fails.
	localHits     []store.Hit
	localVerdicts []algorithm.Verdict
}

// reset empties s for reuse. It leaves the old contents in place: clearing
// them costs more than it saves, and the next request overwrites them.
func (s *scratch) reset() {
	s.descs = s.descs[:0]
	s.hits = s.hits[:0]
	s.limits = s.limits[:0]
	s.verdicts = s.verdicts[:0]
	s.entries = s.entries[:0]
	s.plain = s.plain[:0]
	s.buf = s.buf[:0]
	s.localHits = s.localHits[:0]
}

// answer is a Response allocated together with room for the common case of
// one status and a handful of headers, so a typical answer costs one
// allocation.
type answer struct {
	resp     Response
	statuses [1]Status
	headers  [6]Header
}

// Check decides req. It returns an error wrapping ErrInvalidRequest for a
// malformed request or one beyond the bounds of Options, and the context's error when ctx ends before the store
// answers; a store failure is not an error but answers by the rules' failure
// modes, marked degraded.
func (l *Limiter) Check(ctx context.Context, req *Request) (*Response, error) {
	a := new(answer)
	resp := &a.resp
	resp.Statuses = a.statuses[:0]
	resp.Headers = a.headers[:0]
	if err := l.CheckInto(ctx, req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// CheckInto is Check writing its answer into resp, reusing the arrays of
// resp.Statuses and resp.Headers, so a caller that converts answers at once
// (such as the gRPC adapter) can pool Responses. Header values and Limits
// in resp stay valid after resp is reused; resp itself must not be used by
// anyone else meanwhile.
func (l *Limiter) CheckInto(ctx context.Context, req *Request, resp *Response) (err error) {
	var tr *checkTrace
	if l.tracer != nil {
		ctx, tr = l.startCheck(ctx, req)
		defer func() { tr.end(resp, err) }()
	}
	marked, err := l.bounds.validate(req)
	if err != nil {
		return err
	}
	start := l.now()
	n := len(req.Descriptors)
	resp.Code = OK
	resp.Statuses = grow(resp.Statuses, n)
	resp.Headers = resp.Headers[:0]
	resp.Body = nil

	var dom *descriptor.Domain
	tree := l.tree()
	if tree != nil {
		dom = tree.Domain(req.Domain)
	}
	if dom == nil {
		for i := range resp.Statuses {
			resp.Statuses[i] = Status{Code: OK}
		}
		l.metrics.decisions.Add(ctx, int64(n), l.metrics.unknownDomain...)
		l.metrics.latency.Record(ctx, l.since(start).Seconds())
		return nil
	}
	labels := l.labelsFor(tree)

	s := l.pool.Get().(*scratch)
	defer func() {
		s.reset()
		l.pool.Put(s)
	}()

	var set *override.Set
	if l.overrides != nil {
		set = l.overrides()
	}
	l.resolve(s, dom, req, marked, set, start)
	l.buildHits(s, dom, req)

	var storeErr error
	if len(s.hits) > 0 {
		s.verdicts = grow(s.verdicts, len(s.hits))
		storeErr = l.apply(ctx, s.hits, s.verdicts)
		if storeErr != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			l.storeFailed(ctx, req.Domain, storeErr)
			l.decideLocally(ctx, s)
		}
	}

	var f flags
	hardOver := false
	quotaSeen, quotaOver := 0, 0
	for i := range s.descs {
		st := &s.descs[i]
		out := &resp.Statuses[i]
		var result result
		var label *descriptor.Limit // the limit the metrics name, when not out.Limit
		switch st.kind {
		case kindUnmatched:
			*out = Status{Code: OK}
			result = resultUnmatched
		case kindReplaced:
			*out = Status{Code: OK}
			result = resultReplaced
		case kindUnlimited:
			*out = Status{Code: OK, Remaining: Unlimited}
			result = resultUnlimited
		case kindAllow:
			*out = Status{Code: OK, Remaining: Unlimited}
			result = resultAllowlist
			f |= flagAllow
		case kindDeny:
			if st.shadow {
				*out = Status{Code: OK}
				result = resultShadowDenylist
				break
			}
			*out = Status{Code: OverLimit}
			result = resultDenylist
			f |= flagDeny
			hardOver = true
		case kindCounted:
			var over bool
			switch {
			case storeErr == nil:
				*out, over = s.status(st)
			case st.local:
				*out, over = s.status(st)
				f |= flagDegraded
				label = out.Limit
				out.Limit = l.localLimit(out.Limit)
			default:
				*out = l.failureStatus(s, st, storeErr)
				over = out.Code == OverLimit
				f |= flagDegraded
			}
			switch {
			case !over:
				result = resultOK
			case st.shadow:
				out.Code = OK
				out.RetryAfter, out.Penalized, out.Never = 0, false, false
				result = resultShadowOverLimit
			default:
				result = resultOverLimit
				if !st.quota {
					hardOver = true
				}
				if out.Penalized {
					result = resultPenalized
					f |= flagPenalty
				}
			}
			if storeErr != nil && !st.local {
				result = resultDegraded
			} else if st.charged {
				l.countPastLimit(ctx, s, st, labels, req.Domain, dom)
			}
			if st.quota {
				quotaSeen++
				if over && !st.shadow {
					quotaOver++
				}
			}
		}
		if st.kind != kindUnmatched && st.kind != kindReplaced && !st.override {
			out.Rule = st.rule
		}
		if label == nil {
			label = out.Limit
		}
		l.metrics.decisions.Add(ctx, 1, labels.options(req.Domain, dom, st, label, result)...)
		if tr != nil {
			tr.record(l, st, label, result, storeErr != nil)
		}
	}
	if hardOver || (quotaSeen > 0 && quotaOver == quotaSeen) {
		resp.Code = OverLimit
		if !hardOver && storeErr == nil {
			// Every quota descriptor is over: the request is rejected, but
			// its soft hits could not block the batch.
			l.refund(ctx, s)
		}
	}
	l.addHeaders(s, resp, start, f)
	l.metrics.latency.Record(ctx, l.since(start).Seconds())
	return nil
}

// resolve matches every descriptor of req to its rule and fills s.descs.
// marked says whether any descriptor carries a ChargeKey entry. The
// overrides of set that apply at now replace the limits of counted
// descriptors.
func (l *Limiter) resolve(s *scratch, dom *descriptor.Domain, req *Request, marked bool, set *override.Set, now time.Time) {
	s.descs = grow(s.descs, len(req.Descriptors))
	if marked {
		// Room for every entry at once, so that the slices of s.plain
		// taken below are never moved by a later append.
		n := 0
		for i := range req.Descriptors {
			n += len(req.Descriptors[i].Entries)
		}
		if cap(s.plain) < n {
			s.plain = make([]descriptor.Entry, 0, n)
		}
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		st := &s.descs[i]
		*st = descState{}
		entries := d.Entries
		if marked {
			if st.plain, st.always = s.unmark(d.Entries); st.always {
				entries = st.plain
			}
		}
		rule := dom.Match(entries)
		st.rule = rule
		switch {
		case rule != nil && rule.Action == descriptor.ActionDeny:
			st.kind = kindDeny
			st.shadow = l.shadow || rule.ShadowMode
		case rule != nil && rule.Action == descriptor.ActionAllow:
			st.kind = kindAllow
		case d.Override != nil:
			// Like envoyproxy/ratelimit, an override applies whether or not
			// a rule matches, replaces an unlimited rule's exemption, and
			// ignores the rule's shadow and quota mode. The rule's algorithm
			// still counts it.
			algo, charge, precision := l.defaultAlgo, l.defaultCharge, descriptor.PrecisionStrict
			if rule != nil && len(rule.Limits) > 0 {
				if rule.Limits[0].Algorithm != 0 {
					algo = rule.Limits[0].Algorithm
				}
				charge = rule.Limits[0].Charge
				precision = rule.Limits[0].Precision
			}
			if st.always {
				charge = algorithm.ChargeAlways
			}
			// The override's Status.Limit points into this slice, so it
			// outlives the pooled scratch.
			st.limits = []descriptor.Limit{{
				Unit:            d.Override.Unit,
				UnitMultiplier:  max(d.Override.UnitMultiplier, 1),
				RequestsPerUnit: d.Override.RequestsPerUnit,
				Algorithm:       algo,
				Charge:          charge,
				Precision:       precision,
			}}
			st.kind = kindCounted
			st.override = true
			st.shadow = l.shadow
		case rule == nil:
			st.kind = kindUnmatched
		case rule.Unlimited:
			st.kind = kindUnlimited
		case len(rule.Limits) == 0:
			st.kind = kindUnmatched
		default:
			st.kind = kindCounted
			st.limits = rule.Limits
			st.shadow = l.shadow || rule.ShadowMode
			st.quota = rule.QuotaMode
		}
		if set != nil && st.kind == kindCounted {
			if lv := set.Match(req.Domain, entries, now); lv != nil {
				// An Envoy override's limits are its own: nothing to cache
				// them by.
				by := rule
				if st.override {
					by = nil
				}
				st.limits, st.admin = lv.Limits(by, st.limits), lv
			}
		}
	}
}

// unmark returns entries without their ChargeKey entries, copied into
// s.plain, and true; or nil and false when entries have none.
// bounds.validate has checked their values.
func (s *scratch) unmark(entries []descriptor.Entry) ([]descriptor.Entry, bool) {
	at := -1
	for j := range entries {
		if entries[j].Key == ChargeKey {
			at = j
			break
		}
	}
	if at < 0 {
		return nil, false
	}
	first := len(s.plain)
	s.plain = append(s.plain, entries[:at]...)
	for _, e := range entries[at+1:] {
		if e.Key != ChargeKey {
			s.plain = append(s.plain, e)
		}
	}
	return s.plain[first:len(s.plain):len(s.plain)], true
}

// replaced reports whether lim, a limit of rule, is replaced: whether its
// name appears in the replaces list of another rule matched in the same
// request. As in envoyproxy/ratelimit the replacing rule may itself be
// unlimited, a list rule or replaced, but not one answered by an Envoy
// override, which has no replaces.
func (s *scratch) replaced(rule *descriptor.Rule, lim *descriptor.Limit) bool {
	if lim.Name == "" {
		return false
	}
	for i := range s.descs {
		other := s.descs[i].rule
		if other == nil || other == rule || s.descs[i].override {
			continue
		}
		for _, name := range other.Replaces {
			if name == lim.Name {
				return true
			}
		}
	}
	return false
}

// replacedAt reports whether st's limit j is replaced (see replaced): by
// the name of the rule's own limit j when an operator's multiplier renamed
// it; an operator's absolute limit, like an Envoy override, never is.
func (s *scratch) replacedAt(st *descState, j int) bool {
	switch {
	case st.admin == nil:
		return s.replaced(st.rule, &st.limits[j])
	case st.admin.Limit != nil:
		return false
	}
	return s.replaced(st.rule, &st.rule.Limits[j])
}

// buildHits appends one hit per applicable limit of every counted
// descriptor to s.hits. The hits of a descriptor marked with ChargeKey are
// charged always, whatever their limits say.
func (l *Limiter) buildHits(s *scratch, dom *descriptor.Domain, req *Request) {
	// A deny list rejects the request whatever the counts, so the other
	// descriptors' hits only check, except the always-charged ones.
	anyReplaces, denied := false, false
	for i := range s.descs {
		st := &s.descs[i]
		if st.rule != nil && len(st.rule.Replaces) > 0 {
			anyReplaces = true
		}
		if st.kind == kindDeny && !st.shadow {
			denied = true
		}
	}
	shardBy := dom.ShardBy()
	for i := range s.descs {
		st := &s.descs[i]
		if st.kind != kindCounted {
			continue
		}
		d := &req.Descriptors[i]

		// The counted entries: the request's, with the rule's shared
		// pattern in place of the value where the rule sets one. An
		// override counts the request's own entries.
		first := len(s.entries)
		plain := d.Entries
		if st.always {
			plain = st.plain
		}
		for j, e := range plain {
			v := e.Value
			if !st.override && st.rule != nil && j < len(st.rule.Shared) && st.rule.Shared[j] != "" {
				v = st.rule.Shared[j]
			}
			s.entries = append(s.entries, store.Entry{Key: e.Key, Value: v})
		}
		entries := s.entries[first:len(s.entries):len(s.entries)]
		shard := entries[0].Value
		if shardBy != "" {
			for _, e := range entries {
				if e.Key == shardBy {
					shard = e.Value
					break
				}
			}
		}

		cost := int64(max(req.Hits, 1))
		if d.HasHits {
			cost = int64(min(d.Hits, math.MaxInt64))
		}
		if d.Refund {
			cost = -cost
		}

		st.firstHit = len(s.hits)
		for j := range st.limits {
			lim := &st.limits[j]
			if anyReplaces && !st.override && s.replacedAt(st, j) {
				continue
			}
			s.hits = append(s.hits, store.Hit{
				Domain:  req.Domain,
				Entries: entries,
				Shard:   shard,
				Limit:   lim.Algo(),
				Cost:    cost,
				Soft:    st.shadow || st.quota,
				Cached:  lim.Precision == descriptor.PrecisionCached && lim.Algorithm.Leasable(),
				Penalty: lim.Penalty,
			})
			if h := &s.hits[len(s.hits)-1]; st.always || h.Limit.Charge == algorithm.ChargeAlways {
				h.Limit.Charge = algorithm.ChargeAlways
				st.charged = true
			} else if denied {
				h.Cost = min(h.Cost, 0)
			}
			s.limits = append(s.limits, lim)
		}
		st.nHits = len(s.hits) - st.firstHit
		if st.nHits == 0 {
			st.kind = kindReplaced
		}
	}
}

// countPastLimit adds to tollgate_charged_past_limit_hits the costs of
// st's always-charged hits that the store rejected, and so charged past
// their limits.
func (l *Limiter) countPastLimit(ctx context.Context, s *scratch, st *descState, labels *labelCache, domain string, dom *descriptor.Domain) {
	for h := st.firstHit; h < st.firstHit+st.nHits; h++ {
		hit := &s.hits[h]
		if hit.Limit.Charge == algorithm.ChargeAlways && hit.Cost > 0 && !s.verdicts[h].Allowed {
			l.metrics.pastLimit.Add(ctx, hit.Cost, labels.set(domain, dom, st, s.limits[h]).pastLimit...)
		}
	}
}

// refund gives back what the admitted hits of a rejected request consumed,
// keeping the request all or nothing when only soft hits rejected it.
// Always-charged hits keep their cost. A failure is counted as a store
// error.
func (l *Limiter) refund(ctx context.Context, s *scratch) {
	n := 0
	for i := range s.hits {
		if s.verdicts[i].Allowed && s.hits[i].Cost > 0 && s.hits[i].Limit.Charge != algorithm.ChargeAlways {
			s.hits[n] = s.hits[i]
			s.hits[n].Cost = -s.hits[n].Cost
			s.hits[n].Soft = true
			n++
		}
	}
	if n == 0 {
		return
	}
	// The refund's verdicts are not reported; this path is rare enough to
	// allocate them.
	verdicts := make([]algorithm.Verdict, n)
	if err := l.apply(ctx, s.hits[:n], verdicts); err != nil {
		l.storeFailed(ctx, s.hits[0].Domain, err)
	}
}

// status returns the status of a counted descriptor from its verdicts and
// whether it is over the limit: the verdict of a rejected limit (the one
// with the longest wait) when any is rejected, else the one with the least
// remaining.
func (s *scratch) status(st *descState) (Status, bool) {
	best := st.firstHit
	for h := st.firstHit + 1; h < st.firstHit+st.nHits; h++ {
		v, b := &s.verdicts[h], &s.verdicts[best]
		switch {
		case !v.Allowed && b.Allowed:
			best = h
		case !v.Allowed && !b.Allowed && v.RetryAfter > b.RetryAfter:
			best = h
		case v.Allowed && b.Allowed && v.Remaining < b.Remaining:
			best = h
		}
	}
	v := &s.verdicts[best]
	out := Status{
		Code:       OK,
		Limit:      s.limits[best],
		Remaining:  clampUint32(v.Remaining),
		ResetAfter: max(v.ResetAfter, 0),
	}
	if !v.Allowed {
		// Remaining stays the verdict's: a hit of cost 5 is rejected with 3
		// left, and a smaller one would pass.
		out.Code = OverLimit
		out.Penalized = v.Penalized
		if !v.Penalized && s.hits[best].Cost > v.Limit {
			out.Never = true
		} else {
			out.RetryAfter = max(v.RetryAfter, 0)
		}
		return out, true
	}
	return out, false
}

// minStoreTime is the least time a store call is given. A caller with less
// left than the margin and this is answered by the failure modes without
// asking the store, so that tollgate's own backlog does not count as store
// failures (and open the circuit breaker) while the store is healthy.
const minStoreTime = time.Millisecond

// errNoTime is the store error of a call whose caller left no time for it.
var errNoTime = fmt.Errorf("%w: no time left for the store within the caller's deadline", store.ErrUnavailable)

// apply calls the store with a deadline: the earlier of the store timeout and
// the caller's deadline less the margin kept to answer in.
func (l *Limiter) apply(ctx context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	if l.timeout == 0 {
		return l.storeApply(ctx, l.store, "primary", hits, verdicts)
	}
	now := time.Now()
	deadline := now.Add(l.timeout)
	if d, ok := ctx.Deadline(); ok && d.Add(-l.margin).Before(deadline) {
		deadline = d.Add(-l.margin)
	}
	if deadline.Sub(now) < minStoreTime {
		return errNoTime
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return l.storeApply(ctx, l.store, "primary", hits, verdicts)
}

// failureMode returns how st is answered while the store fails.
func (l *Limiter) failureMode(st *descState) descriptor.FailureMode {
	if st.rule == nil {
		return l.defaultFail
	}
	return st.rule.FailureMode
}

// decideLocally decides the counted descriptors whose failure mode is
// local with the fallback store, each limit divided by the share, and
// marks them local. The fallback's batch is all-or-nothing like the
// store's. If the fallback fails too, they are answered as open.
func (l *Limiter) decideLocally(ctx context.Context, s *scratch) {
	if l.fallback == nil {
		return
	}
	// A descriptor failing closed rejects the request, which must then
	// charge nothing, so the local hits only check, except the
	// always-charged ones. (A deny list has already made them checks.)
	rejected := false
	for i := range s.descs {
		st := &s.descs[i]
		if st.kind == kindCounted && !st.shadow && !st.quota && l.failureMode(st) == descriptor.FailClosed {
			rejected = true
		}
	}
	for i := range s.descs {
		st := &s.descs[i]
		if st.kind != kindCounted || l.failureMode(st) != descriptor.FailLocal {
			continue
		}
		for _, h := range s.hits[st.firstHit : st.firstHit+st.nHits] {
			h.Limit.Requests = shareOf(h.Limit.Requests, l.share)
			h.Limit.Burst = shareOf(h.Limit.Burst, l.share)
			if rejected && h.Limit.Charge != algorithm.ChargeAlways {
				h.Cost = min(h.Cost, 0)
			}
			s.localHits = append(s.localHits, h)
		}
	}
	if len(s.localHits) == 0 {
		return
	}
	s.localVerdicts = grow(s.localVerdicts, len(s.localHits))
	if err := l.storeApply(ctx, l.fallback, "fallback", s.localHits, s.localVerdicts); err != nil {
		l.log.LogAttrs(ctx, slog.LevelError, "local fallback failed; answering as failure mode open", slog.Any("error", err))
		return
	}
	n := 0
	for i := range s.descs {
		st := &s.descs[i]
		if st.kind != kindCounted || l.failureMode(st) != descriptor.FailLocal {
			continue
		}
		n += copy(s.verdicts[st.firstHit:st.firstHit+st.nHits], s.localVerdicts[n:])
		st.local = true
	}
}

// localLimit returns the share of lim the fallback enforces, which a local
// answer reports. (An outage is rare enough to allocate; the metric labels
// keep using lim, so that they do not multiply.)
func (l *Limiter) localLimit(lim *descriptor.Limit) *descriptor.Limit {
	if lim == nil {
		return nil
	}
	local := *lim
	local.RequestsPerUnit = uint32(shareOf(int64(lim.RequestsPerUnit), l.share))
	local.Burst = uint32(shareOf(int64(lim.Burst), l.share))
	return &local
}

// shareOf is one instance's share of n: n / share, but at least 1 unless n
// is 0, so a share never turns a limit into a block.
func shareOf(n, share int64) int64 {
	if n == 0 {
		return 0
	}
	return max(n/share, 1)
}

// failureStatus answers a counted descriptor whose store could not decide
// and which the fallback did not decide. Failure mode closed rejects it,
// with a Retry-After of the wait the store's error names (a
// store.RetryAfterError, such as an open circuit breaker's) or else
// closedRetryAfter; open (and local without a working fallback) admits it,
// with no current limit and no invented remaining.
func (l *Limiter) failureStatus(s *scratch, st *descState, err error) Status {
	if l.failureMode(st) != descriptor.FailClosed {
		return Status{Code: OK}
	}
	out := Status{Code: OverLimit, RetryAfter: closedRetryAfter}
	if st.nHits > 0 {
		out.Limit = s.limits[st.firstHit]
	}
	if r, ok := errors.AsType[store.RetryAfterError](err); ok && r.RetryAfter() > 0 {
		out.RetryAfter = r.RetryAfter()
	}
	out.ResetAfter = out.RetryAfter
	return out
}

// storeFailed counts a store error and logs it, at most once per
// storeErrorLogInterval.
func (l *Limiter) storeFailed(ctx context.Context, domain string, err error) {
	l.metrics.storeErrors.Add(ctx, 1)
	now := l.now().UnixNano()
	last := l.lastErrLog.Load()
	if now-last < int64(storeErrorLogInterval) || !l.lastErrLog.CompareAndSwap(last, now) {
		l.errsQuiet.Add(1)
		return
	}
	l.log.LogAttrs(ctx, slog.LevelError, "store failed; answering by failure modes",
		slog.String("domain", domain),
		slog.Any("error", err),
		slog.Int64("suppressed", l.errsQuiet.Swap(0)))
}

// clampUint32 converts a remaining count for Envoy's uint32 field.
func clampUint32(v int64) uint32 {
	switch {
	case v < 0:
		return 0
	case v > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}

// grow returns s resized to n, reusing its array when large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
