package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/breaker"
	"github.com/tollgatehq/tollgate/pkg/store/cached"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// The breaker can stand between package cached and its Leaser.
var _ cached.Leaser = (*breaker.Store)(nil)

// flaky is a store that fails with err while err is set, and counts calls.
type flaky struct {
	mu    sync.Mutex
	err   error
	calls int
}

func (f *flaky) Apply(context.Context, []store.Hit, []algorithm.Verdict) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.err
}

func (f *flaky) Reserve(context.Context, []store.LeaseRequest, []algorithm.Lease) error {
	return f.Apply(context.Background(), nil, nil)
}

func (f *flaky) Return(context.Context, []store.LeaseReturn) error {
	return f.Apply(context.Background(), nil, nil)
}

func (f *flaky) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *flaky) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

var errDown = fmt.Errorf("%w: connection refused", store.ErrUnavailable)

func apply(s *breaker.Store) error {
	return s.Apply(context.Background(), nil, nil)
}

func TestOpensProbesAndCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &flaky{err: errDown}
		var changes []breaker.State
		s, err := breaker.New(next, breaker.Options{
			Failures: 3,
			OpenFor:  time.Second,
			OnChange: func(st breaker.State) { changes = append(changes, st) },
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := apply(s); !errors.Is(err, errDown) {
				t.Fatalf("call %d: err = %v, want the store's", i, err)
			}
		}
		if got := s.State(); got != breaker.Open {
			t.Fatalf("after 3 failures: state %v, want open", got)
		}

		// Open: answered at once, without asking the store.
		err = apply(s)
		var open *breaker.OpenError
		if !errors.As(err, &open) || !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("open: err = %v, want an OpenError wrapping ErrUnavailable", err)
		}
		if open.RetryAfter() != time.Second {
			t.Errorf("open: RetryAfter = %v, want 1s", open.RetryAfter())
		}
		if next.count() != 3 {
			t.Errorf("open: the store was called %d times, want 3", next.count())
		}
		time.Sleep(400 * time.Millisecond)
		if got := s.RetryAfter(); got != 600*time.Millisecond {
			t.Errorf("RetryAfter 400ms later = %v, want 600ms", got)
		}

		// Half-open: a failed probe opens it again.
		time.Sleep(600*time.Millisecond + time.Nanosecond)
		if err := apply(s); !errors.Is(err, errDown) {
			t.Fatalf("probe: err = %v, want the store's", err)
		}
		if got := s.State(); got != breaker.Open {
			t.Fatalf("after a failed probe: state %v, want open", got)
		}

		// A successful probe closes it.
		next.set(nil)
		time.Sleep(time.Second + time.Nanosecond)
		if err := apply(s); err != nil {
			t.Fatalf("probe: %v", err)
		}
		if got := s.State(); got != breaker.Closed {
			t.Fatalf("after a good probe: state %v, want closed", got)
		}
		want := []breaker.State{breaker.Open, breaker.HalfOpen, breaker.Open, breaker.HalfOpen, breaker.Closed}
		if !slices.Equal(changes, want) {
			t.Errorf("changes = %v, want %v", changes, want)
		}
	})
}

func TestCountsOnlyStoreFailures(t *testing.T) {
	next := &flaky{}
	s, err := breaker.New(next, breaker.Options{Failures: 2})
	if err != nil {
		t.Fatal(err)
	}
	// A request the store refuses is not a store failure.
	next.set(errors.New("bad request"))
	for range 5 {
		apply(s)
	}
	// Nor is a caller that hung up.
	next.set(errDown)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 5 {
		if err := s.Apply(ctx, nil, nil); !errors.Is(err, errDown) {
			t.Fatalf("canceled call: err = %v, want the store's", err)
		}
	}
	if got := s.State(); got != breaker.Closed {
		t.Fatalf("state %v, want closed", got)
	}
	// A call that runs out of its own deadline is.
	ctx, cancel = context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	for range 2 {
		s.Apply(ctx, nil, nil)
	}
	if got := s.State(); got != breaker.Open {
		t.Fatalf("after 2 timeouts: state %v, want open", got)
	}
}

func TestHalfOpenLetsProbesThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &flaky{err: errDown}
		s, err := breaker.New(next, breaker.Options{Failures: 1, OpenFor: time.Second, Probes: 2})
		if err != nil {
			t.Fatal(err)
		}
		apply(s)
		time.Sleep(time.Second + time.Nanosecond)
		next.set(nil)
		if err := apply(s); err != nil {
			t.Fatalf("first probe: %v", err)
		}
		if got := s.State(); got != breaker.HalfOpen {
			t.Fatalf("after 1 of 2 probes: state %v, want half-open", got)
		}
		if err := apply(s); err != nil {
			t.Fatalf("second probe: %v", err)
		}
		if got := s.State(); got != breaker.Closed {
			t.Fatalf("after 2 probes: state %v, want closed", got)
		}
	})
}

func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		next := &flaky{err: errDown}
		s, err := breaker.New(next, breaker.Options{
			Name:          "redis",
			Failures:      1,
			OpenFor:       time.Second,
			MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		})
		if err != nil {
			t.Fatal(err)
		}
		// collect returns the state gauge and the changes by state, each
		// checked to name the breaker.
		collect := func() (state int64, changes map[string]int64) {
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			changes = map[string]int64{}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					switch data := m.Data.(type) {
					case metricdata.Gauge[int64]:
						for _, dp := range data.DataPoints {
							checkName(t, dp.Attributes)
							state = dp.Value
						}
					case metricdata.Sum[int64]:
						for _, dp := range data.DataPoints {
							checkName(t, dp.Attributes)
							to, _ := dp.Attributes.Value("to")
							changes[to.AsString()] = dp.Value
						}
					}
				}
			}
			return state, changes
		}
		if state, changes := collect(); state != 0 || len(changes) != 0 {
			t.Errorf("new breaker: state %d, changes %v; want 0 and none", state, changes)
		}
		apply(s) // opens
		time.Sleep(time.Second + time.Nanosecond)
		apply(s) // a failed probe: half-open, then open again
		state, changes := collect()
		want := map[string]int64{"open": 2, "half-open": 1}
		if state != 2 || !maps.Equal(changes, want) {
			t.Errorf("after a failed probe: state %d, changes %v; want 2 and %v", state, changes, want)
		}
	})
}

func checkName(t *testing.T, attrs attribute.Set) {
	t.Helper()
	if name, _ := attrs.Value("breaker"); name.AsString() != "redis" {
		t.Errorf("breaker attribute %q, want redis", name.AsString())
	}
}

// TestLeases checks that Reserve and Return count as calls of the store,
// that an open breaker refuses them as it refuses Apply, and that a store
// that does not lease says so.
func TestLeases(t *testing.T) {
	ctx := context.Background()
	calls := map[string]func(*breaker.Store) error{
		"apply":   apply,
		"reserve": func(s *breaker.Store) error { return s.Reserve(ctx, nil, nil) },
		"return":  func(s *breaker.Store) error { return s.Return(ctx, nil) },
	}
	for _, opener := range []string{"reserve", "return"} {
		t.Run(opener, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				next := &flaky{err: errDown}
				s, err := breaker.New(next, breaker.Options{Failures: 2, OpenFor: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				for range 2 {
					if err := calls[opener](s); !errors.Is(err, errDown) {
						t.Fatalf("%s: err = %v, want the store's", opener, err)
					}
				}
				if got := s.State(); got != breaker.Open {
					t.Fatalf("after 2 failed %s calls: state %v, want open", opener, got)
				}
				for _, name := range []string{"apply", "reserve", "return"} {
					var open *breaker.OpenError
					if err := calls[name](s); !errors.As(err, &open) || open.RetryAfter() != time.Second {
						t.Errorf("open: %s: err = %v, want an OpenError to retry after 1s", name, err)
					}
				}
				if next.count() != 2 {
					t.Errorf("the store was called %d times, want 2", next.count())
				}
			})
		})
	}
	t.Run("no leases", func(t *testing.T) {
		s, err := breaker.New(storetest.Failing{Err: errDown}, breaker.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Reserve(ctx, nil, nil); !errors.Is(err, breaker.ErrNoLeases) {
			t.Errorf("Reserve: %v, want ErrNoLeases", err)
		}
		if err := s.Return(ctx, nil); !errors.Is(err, breaker.ErrNoLeases) {
			t.Errorf("Return: %v, want ErrNoLeases", err)
		}
	})
}
