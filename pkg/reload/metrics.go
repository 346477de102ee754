package reload

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the reload metrics.
const meterName = "github.com/tollgatehq/tollgate/pkg/reload"

// metrics holds the reload instruments. Through the Prometheus exporter
// they appear as:
//
//	tollgate_config_reloads_total{result="success"|"failure"}
//	tollgate_config_last_reload_success_timestamp_seconds
//	tollgate_config_last_reload_successful   1 when the latest reload loaded, else 0
//	tollgate_config_info{hash="..."}         always 1; hash identifies the live tree
//
// A Reloader of another rule set (Options.Set) names them
// tollgate_<set>_config_* instead.
type metrics struct {
	// observer observes the gauges until it is unregistered.
	observer  metric.Registration
	reloads   metric.Int64Counter
	succeeded metric.AddOption
	failed    metric.AddOption
}

// newMetrics creates the instruments on mp, named for the rule set set
// (see Options.Set). The gauges are observed from r's status at
// collection time, so they need no updating.
func newMetrics(mp metric.MeterProvider, set string, r *Reloader) (*metrics, error) {
	meter := mp.Meter(meterName)
	prefix := "tollgate.config."
	if set != "" {
		prefix = "tollgate." + set + ".config."
	}
	reloads, err := meter.Int64Counter(prefix+"reloads",
		metric.WithDescription("Descriptor configuration loads by result, the initial load included."),
		metric.WithUnit("{reload}"))
	if err != nil {
		return nil, err
	}
	lastSuccess, err := meter.Float64ObservableGauge(prefix+"last_reload_success_timestamp",
		metric.WithDescription("Unix time of the last successful descriptor configuration load."),
		metric.WithUnit("s"))
	if err != nil {
		return nil, err
	}
	lastOK, err := meter.Int64ObservableGauge(prefix+"last_reload_successful",
		metric.WithDescription("Whether the latest descriptor configuration load succeeded (1) or failed (0)."))
	if err != nil {
		return nil, err
	}
	info, err := meter.Int64ObservableGauge(prefix+"info",
		metric.WithDescription("Always 1; the hash attribute identifies the live descriptor configuration."))
	if err != nil {
		return nil, err
	}
	// The callback lives as long as the meter provider, like the Reloader
	// it reports on, unless New fails.
	observer, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := r.Status()
		if !st.LastSuccess.IsZero() {
			o.ObserveFloat64(lastSuccess, float64(st.LastSuccess.UnixNano())/1e9)
			o.ObserveInt64(info, 1, metric.WithAttributes(attribute.String("hash", st.Hash)))
		}
		ok := int64(1)
		if st.LastError != nil {
			ok = 0
		}
		o.ObserveInt64(lastOK, ok)
		return nil
	}, lastSuccess, lastOK, info)
	if err != nil {
		return nil, err
	}
	return &metrics{
		observer:  observer,
		reloads:   reloads,
		succeeded: metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "success"))),
		failed:    metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "failure"))),
	}, nil
}

// success counts a successful load.
func (m *metrics) success() { m.reloads.Add(context.Background(), 1, m.succeeded) }

// failure counts a failed load.
func (m *metrics) failure() { m.reloads.Add(context.Background(), 1, m.failed) }
