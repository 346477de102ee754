package cached

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// meterName is the instrumentation scope of the Store's instruments.
const meterName = "github.com/tollgatehq/tollgate/pkg/store/cached"

// The paths of tollgate_cached_decisions.
const (
	pathLocal       = iota // from the lease, no I/O
	pathRenewalWait        // after waiting for or making a reservation
	pathStrict             // by the inner store
	pathOverLimit          // rejected locally: the counter is known over
	numPaths
)

var pathNames = [numPaths]string{
	pathLocal:       "local",
	pathRenewalWait: "renewal_wait",
	pathStrict:      "strict",
	pathOverLimit:   "over_limit",
}

// The operations of tollgate_cached_leaser_calls.
const (
	opReserve = "reserve"
	opReturn  = "return"
)

// metrics holds the Store's instruments. Decisions are counted in
// atomics and observed at collection, so the local path records nothing
// through the SDK.
type metrics struct {
	paths     [numPaths]atomic.Int64
	evictions atomic.Int64

	calls    metric.Int64Counter
	leased   metric.Int64Counter
	returned metric.Int64Counter
	size     metric.Int64Histogram
}

func newMetrics(mp metric.MeterProvider, s *Store) *metrics {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter(meterName)
	m := &metrics{}
	// The SDK reports instrument errors through otel's error handler and
	// returns a working no-op instrument, so errors need no handling here.
	decisions, _ := meter.Int64ObservableCounter("tollgate_cached_decisions",
		metric.WithDescription("Cached hits decided, by path: local (from a lease), renewal_wait (after a reservation), strict (by the shared store), over_limit (rejected locally until the counter's reset)."),
		metric.WithUnit("{hit}"))
	evictions, _ := meter.Int64ObservableCounter("tollgate_cached_evictions",
		metric.WithDescription("Counters forgotten to stay within the key cap, their leases returned."),
		metric.WithUnit("{counter}"))
	held, _ := meter.Int64ObservableGauge("tollgate_cached_counters",
		metric.WithDescription("Counters held by the cached store."),
		metric.WithUnit("{counter}"))
	sets := [numPaths]metric.ObserveOption{}
	for p := range sets {
		sets[p] = metric.WithAttributeSet(attribute.NewSet(attribute.String("path", pathNames[p])))
	}
	_, _ = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for p := range m.paths {
			o.ObserveInt64(decisions, m.paths[p].Load(), sets[p])
		}
		o.ObserveInt64(evictions, m.evictions.Load())
		o.ObserveInt64(held, int64(s.Len()))
		return nil
	}, decisions, evictions, held)
	m.calls, _ = meter.Int64Counter("tollgate_cached_leaser_calls",
		metric.WithDescription("Calls to the shared store to reserve or return leases, by op and result."),
		metric.WithUnit("{call}"))
	m.leased, _ = meter.Int64Counter("tollgate_cached_leased_hits",
		metric.WithDescription("Hits granted in leases."),
		metric.WithUnit("{hit}"))
	m.returned, _ = meter.Int64Counter("tollgate_cached_returned_hits",
		metric.WithDescription("Unspent hits of leases given back."),
		metric.WithUnit("{hit}"))
	m.size, _ = meter.Int64Histogram("tollgate_cached_lease_size",
		metric.WithDescription("Hits per lease granted (grants of nothing included)."),
		metric.WithUnit("{hit}"),
		metric.WithExplicitBucketBoundaries(0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000))
	return m
}

// call counts a Leaser call.
func (m *metrics) call(ctx context.Context, op string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.calls.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("op", op), attribute.String("result", result)))
}

// granted records a grant of hits.
func (m *metrics) granted(hits int64) {
	ctx := context.Background()
	m.leased.Add(ctx, hits)
	m.size.Record(ctx, hits)
}
