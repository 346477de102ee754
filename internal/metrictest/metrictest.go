// Package metrictest reads OpenTelemetry metrics in tests.
package metrictest

import (
	"context"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// New returns a meter provider for the code under test and a function
// that adds up, across all attribute sets, the points of the Int64
// counter, up-down counter or gauge called name, or the values recorded by
// the Int64 histogram called name. A metric not recorded yet reads 0.
func New(t testing.TB) (*sdkmetric.MeterProvider, func(name string) int64) {
	mp, series := NewSeries(t)
	return mp, func(name string) int64 {
		t.Helper()
		var n int64
		for _, v := range series(name) {
			n += v
		}
		return n
	}
}

// NewSeries is New with a function that returns the points of the
// metric called name by attribute set, each written as its attributes,
// sorted by key, in the form `key="value",key="value"` ("" for none).
func NewSeries(t testing.TB) (*sdkmetric.MeterProvider, func(name string) map[string]int64) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	return mp, func(name string) map[string]int64 {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatalf("collecting metrics: %v", err)
		}
		out := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != name {
					continue
				}
				switch data := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, dp := range data.DataPoints {
						out[labels(dp.Attributes)] += dp.Value
					}
				case metricdata.Gauge[int64]:
					for _, dp := range data.DataPoints {
						out[labels(dp.Attributes)] += dp.Value
					}
				case metricdata.Histogram[int64]:
					for _, dp := range data.DataPoints {
						out[labels(dp.Attributes)] += dp.Sum
					}
				}
			}
		}
		return out
	}
}

// labels writes set as NewSeries keys its points.
func labels(set attribute.Set) string {
	kvs := set.ToSlice()
	slices.SortFunc(kvs, func(a, b attribute.KeyValue) int { return strings.Compare(string(a.Key), string(b.Key)) })
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		parts[i] = string(kv.Key) + `="` + kv.Value.String() + `"`
	}
	return strings.Join(parts, ",")
}
