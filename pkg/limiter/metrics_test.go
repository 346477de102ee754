package limiter

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// collect returns the int64 sums of the named counter, keyed by their
// attributes as "k=v,k=v", and the number of latency observations.
func collect(t *testing.T, reader sdkmetric.Reader, counter string) (map[string]int64, uint64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collecting: %v", err)
	}
	sums := map[string]int64{}
	var latency uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name != counter {
					continue
				}
				for _, dp := range data.DataPoints {
					var kv []string
					for _, a := range dp.Attributes.ToSlice() {
						kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.String()))
					}
					sums[strings.Join(kv, ",")] = dp.Value
				}
			case metricdata.Histogram[float64]:
				if m.Name == "tollgate_check_duration" {
					for _, dp := range data.DataPoints {
						latency += dp.Count
					}
				}
			}
		}
	}
	return sums, latency
}

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	f := newFixture(t, policyYAML, func(o *Options) {
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	for range 3 {
		f.check(t, req("api", d("api_key=secret-value")))
	}
	f.check(t, req("api", d("api_key=internal_1"), d("api_key=revoked_1"), d("free=x"), d("other=1")))
	f.check(t, req("elsewhere", d("api_key=secret-value")))

	got, latency := collect(t, reader, "tollgate_decisions")
	want := map[string]int64{
		"domain=api,limit=per_key,result=ok,rule=api_key":            2,
		"domain=api,limit=per_key,result=over_limit,rule=api_key":    1,
		"domain=api,limit=,result=allowlist,rule=api_key=internal_*": 1,
		"domain=api,limit=,result=denylist,rule=api_key=revoked_*":   1,
		"domain=api,limit=,result=unlimited,rule=free":               1,
		"domain=api,limit=,result=unmatched,rule=":                   1,
		"domain=(unknown),limit=,result=unmatched,rule=":             1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("tollgate_decisions:\n got %v\nwant %v", sorted(got), sorted(want))
	}
	for k := range got {
		if strings.Contains(k, "secret-value") || strings.Contains(k, "elsewhere") {
			t.Errorf("attribute set %q carries a request value", k)
		}
	}
	if latency != 5 {
		t.Errorf("tollgate_check_duration has %d observations, want 5", latency)
	}
}

func TestMetricsStoreErrors(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	f := newFixture(t, policyYAML, func(o *Options) {
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		o.Store = storetest.Failing{Err: store.ErrUnavailable}
	})
	f.check(t, req("api", d("api_key=a"), d("api_key=b")))
	f.check(t, req("api", d("api_key=a")))
	errs, _ := collect(t, reader, "tollgate_store_errors")
	if !maps.Equal(errs, map[string]int64{"": 2}) {
		t.Errorf("tollgate_store_errors = %v, want 2 without attributes", errs)
	}
	decisions, _ := collect(t, reader, "tollgate_decisions")
	if want := map[string]int64{"domain=api,limit=,result=degraded,rule=api_key": 3}; !maps.Equal(decisions, want) {
		t.Errorf("tollgate_decisions = %v, want %v", decisions, want)
	}
}

func sorted(m map[string]int64) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return out
}
