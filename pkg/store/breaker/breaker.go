// Package breaker puts a circuit breaker in front of a store.Store, so that
// once a store keeps failing, decisions stop waiting on it.
//
// The state machine is github.com/sony/gobreaker/v2: a small, maintained
// library whose breaker counts consecutive failures, lets a bounded number
// of probes through when half-open, and can leave errors out of the
// counts (a caller that hung up says nothing about the store). This
// package adds what a rate limiter needs on top: the time until the
// breaker may close, one log line per state change, a state metric and a
// callback for health reporting.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// Defaults of the Options fields.
const (
	DefaultFailures = 5
	DefaultOpenFor  = 2 * time.Second
	DefaultProbes   = 1
)

// State is the state of a breaker.
type State int

// The states. Closed passes every call; Open fails every call at once;
// HalfOpen passes a few probes and fails the rest.
const (
	Closed State = iota
	HalfOpen
	Open
)

// String returns "closed", "half-open" or "open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Options configures a Store. Every field has a working zero value.
type Options struct {
	// Name tells breakers apart in logs and metrics; "" means "store".
	Name string
	// Failures is the number of consecutive failed calls that opens the
	// breaker; 0 means DefaultFailures.
	Failures uint32
	// OpenFor is how long the breaker stays open before it probes; 0 means
	// DefaultOpenFor.
	OpenFor time.Duration
	// Probes is the number of calls let through while half-open, all of
	// which must succeed to close the breaker; 0 means DefaultProbes.
	Probes uint32
	// OnChange is called with every new state, in order, under the
	// breaker's lock: it must return quickly and not call the Store.
	OnChange func(State)
	// Logger receives one line per state change; nil discards.
	Logger *slog.Logger
	// MeterProvider provides tollgate_breaker_state; nil means a no-op
	// provider.
	MeterProvider metric.MeterProvider
}

// Store is a store.Store whose calls pass through a circuit breaker. A
// call fails and counts when the store returns an error wrapping
// store.ErrUnavailable; an error of the caller's context (other than the
// deadline the call was given) is not counted, and neither is any other
// error, which is about the request, not the store.
type Store struct {
	next    store.Store
	cb      *gobreaker.CircuitBreaker[struct{}]
	openFor time.Duration
	name    string
	log     *slog.Logger
	changes metric.Int64Counter
	// changedTo holds the attributes of changes, by the new state.
	changedTo [Open + 1]metric.AddOption

	mu       sync.Mutex // guards state and openedAt
	state    State
	openedAt time.Time
	onChange func(State)
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Clearer = (*Store)(nil)
)

// OpenError is the error of a call that the breaker refused without
// asking the store. It wraps store.ErrUnavailable and is a
// store.RetryAfterError.
type OpenError struct {
	retryAfter time.Duration // 0 while half-open
}

var _ store.RetryAfterError = (*OpenError)(nil)

// RetryAfter returns how long until the breaker lets a probe through; 0
// while half-open.
func (e *OpenError) RetryAfter() time.Duration { return e.retryAfter }

// Error says that the breaker refused the call, and when it probes next.
func (e *OpenError) Error() string {
	if e.retryAfter == 0 {
		return fmt.Sprintf("%v: circuit breaker half-open, probe in flight", store.ErrUnavailable)
	}
	return fmt.Sprintf("%v: circuit breaker open, next probe in %v", store.ErrUnavailable, e.retryAfter)
}

// Unwrap returns store.ErrUnavailable.
func (e *OpenError) Unwrap() error { return store.ErrUnavailable }

// New returns next behind a circuit breaker.
func New(next store.Store, opts Options) (*Store, error) {
	if next == nil {
		return nil, errors.New("breaker: no store")
	}
	s := &Store{
		next:     next,
		openFor:  opts.OpenFor,
		name:     opts.Name,
		log:      opts.Logger,
		onChange: opts.OnChange,
	}
	if s.openFor <= 0 {
		s.openFor = DefaultOpenFor
	}
	if s.name == "" {
		s.name = "store"
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "breaker", "breaker", s.name)
	failures := opts.Failures
	if failures == 0 {
		failures = DefaultFailures
	}
	probes := opts.Probes
	if probes == 0 {
		probes = DefaultProbes
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter("github.com/tollgatehq/tollgate/pkg/store/breaker")
	gauge, err := meter.Int64ObservableGauge("tollgate_breaker_state",
		metric.WithDescription("State of a store's circuit breaker: 0 closed, 1 half-open, 2 open."))
	if err != nil {
		return nil, fmt.Errorf("breaker: creating instruments: %w", err)
	}
	named := metric.WithAttributes(attribute.String("breaker", s.name))
	if _, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(gauge, int64(s.State()), named)
		return nil
	}, gauge); err != nil {
		return nil, fmt.Errorf("breaker: creating instruments: %w", err)
	}
	if s.changes, err = meter.Int64Counter("tollgate_breaker_changes",
		metric.WithDescription("State changes of a store's circuit breaker, by the state changed to.")); err != nil {
		return nil, fmt.Errorf("breaker: creating instruments: %w", err)
	}
	for st := Closed; st <= Open; st++ {
		s.changedTo[st] = metric.WithAttributes(attribute.String("breaker", s.name), attribute.String("to", st.String()))
	}
	s.cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        s.name,
		MaxRequests: probes,
		Timeout:     s.openFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		// Only the store's failures count; IsExcluded leaves out the rest.
		IsSuccessful:  func(err error) bool { return !errors.Is(err, store.ErrUnavailable) },
		IsExcluded:    func(err error) bool { return errors.Is(err, errCallerGone) },
		OnStateChange: s.changed,
	})
	return s, nil
}

// errCallerGone marks a call whose caller ended its context first.
var errCallerGone = errors.New("caller gone")

// Apply passes the call to the store unless the breaker is open.
func (s *Store) Apply(ctx context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	return s.call(ctx, func() error { return s.next.Apply(ctx, hits, verdicts) })
}

// leaser is a store that leases budgets, as package cached's Leaser.
type leaser interface {
	Reserve(ctx context.Context, reqs []store.LeaseRequest, leases []algorithm.Lease) error
	Return(ctx context.Context, returns []store.LeaseReturn) error
}

// ErrNoLeases reports a Reserve or Return on a Store whose store does not
// lease budgets: a programming error.
var ErrNoLeases = errors.New("breaker: the store does not lease budgets")

// Reserve passes the call to the store, which must lease budgets, unless
// the breaker is open. It counts as a call like Apply, so that the
// breaker can stand between package cached and the Redis store.
func (s *Store) Reserve(ctx context.Context, reqs []store.LeaseRequest, leases []algorithm.Lease) error {
	l, ok := s.next.(leaser)
	if !ok {
		return ErrNoLeases
	}
	return s.call(ctx, func() error { return l.Reserve(ctx, reqs, leases) })
}

// Return passes the call to the store, which must lease budgets, unless
// the breaker is open; it counts as a call like Apply.
func (s *Store) Return(ctx context.Context, returns []store.LeaseReturn) error {
	l, ok := s.next.(leaser)
	if !ok {
		return ErrNoLeases
	}
	return s.call(ctx, func() error { return l.Return(ctx, returns) })
}

// call runs f, a call of the store, through the breaker.
func (s *Store) call(ctx context.Context, f func() error) error {
	var storeErr error
	_, err := s.cb.Execute(func() (struct{}, error) {
		storeErr = f()
		if storeErr != nil && errors.Is(ctx.Err(), context.Canceled) {
			return struct{}{}, errCallerGone
		}
		return struct{}{}, storeErr
	})
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return &OpenError{retryAfter: s.RetryAfter()}
	}
	return storeErr
}

// State returns the breaker's state.
func (s *Store) State() State {
	s.cb.State() // makes an open breaker whose time is up half-open
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// RetryAfter returns how long until the breaker lets a probe through: 0
// unless it is open.
func (s *Store) RetryAfter() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != Open {
		return 0
	}
	return max(time.Until(s.openedAt.Add(s.openFor)), 0)
}

// changed records a state change of the underlying breaker, counts and
// logs it and calls OnChange. gobreaker calls it under its lock, so changes arrive in
// order; they are rare, so the log line written meanwhile costs nothing.
func (s *Store) changed(_ string, _, to gobreaker.State) {
	now := fromGobreaker(to)
	s.mu.Lock()
	from := s.state
	s.state = now
	if now == Open {
		s.openedAt = time.Now()
	}
	s.mu.Unlock()
	s.changes.Add(context.Background(), 1, s.changedTo[now])
	switch now {
	case Open:
		s.log.Warn("store failing; circuit breaker opened", "from", from.String(), "probe_in", s.openFor)
	case HalfOpen:
		s.log.Info("circuit breaker half-open; probing the store")
	case Closed:
		s.log.Info("store answering again; circuit breaker closed")
	}
	if s.onChange != nil {
		s.onChange(now)
	}
}

// fromGobreaker returns the State of a gobreaker state.
func fromGobreaker(st gobreaker.State) State {
	switch st {
	case gobreaker.StateOpen:
		return Open
	case gobreaker.StateHalfOpen:
		return HalfOpen
	}
	return Closed
}

// Clear passes the call to the store unless the breaker is open; it counts
// as a call like Apply. It returns store.ErrCannotClear when the store
// cannot clear counters.
func (s *Store) Clear(ctx context.Context, counters []store.Hit) error {
	c, ok := s.next.(store.Clearer)
	if !ok {
		return store.ErrCannotClear
	}
	return s.call(ctx, func() error { return c.Clear(ctx, counters) })
}
