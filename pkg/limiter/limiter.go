package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// DefaultDeadlineMargin is the default of Options.DeadlineMargin: a
// store call waiting on Redis answers up to 1–2 ms after its deadline
// (the timer that ends the wait fires late on a busy machine), and the
// answer must still reach Envoy before its own.
const DefaultDeadlineMargin = 5 * time.Millisecond

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
	// Observer hears every descriptor decided by a limit or an override
	// (see Observer); nil hears none, at no cost.
	Observer Observer
	// Recorder hears every decided request (see Recorder); nil hears
	// none, at no cost.
	Recorder Recorder
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
	observer      Observer // nil: none
	recorder      Recorder // nil: none

	// labels caches metric attribute sets for the current tree.
	labels atomic.Pointer[labelCache]
	pool   sync.Pool // *scratch

	lastErrLog atomic.Int64 // Unix nanoseconds of the last store-error log line
	errsQuiet  atomic.Int64 // store errors not logged since then
	// envoyNoted is set once an ignored Envoy limit override was logged.
	envoyNoted atomic.Bool
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
		now:      opts.Now,
		log:      opts.Logger,
		onReset:  opts.OnReset,
		observer: opts.Observer,
		recorder: opts.Recorder,
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
