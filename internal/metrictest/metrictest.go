// Package metrictest reads OpenTelemetry metrics in tests.
package metrictest

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// New returns a meter provider for the code under test and a function
// that adds up, across all attribute sets, the points of the Int64
// counter, up-down counter or gauge called name, or the values recorded by
// the Int64 histogram called name. A metric not recorded yet reads 0.
func New(t testing.TB) (*sdkmetric.MeterProvider, func(name string) int64) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	return mp, func(name string) int64 {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatalf("collecting metrics: %v", err)
		}
		var n int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != name {
					continue
				}
				switch data := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, dp := range data.DataPoints {
						n += dp.Value
					}
				case metricdata.Gauge[int64]:
					for _, dp := range data.DataPoints {
						n += dp.Value
					}
				case metricdata.Histogram[int64]:
					for _, dp := range data.DataPoints {
						n += dp.Sum
					}
				}
			}
		}
		return n
	}
}
