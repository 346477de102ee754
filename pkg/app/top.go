package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/top"
	topredis "github.com/tollgatehq/tollgate/pkg/top/redis"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// newTop builds the heavy-hitter summaries when --top-capacity is not 0:
// the recorder, and with Redis the fleet that shares every instance's.
// It needs the store chain built.
func (a *App) newTop() error {
	s := a.settings.Top
	if s.Capacity == 0 {
		return nil
	}
	name := instanceName()
	opts := top.Options{Capacity: s.Capacity, Instance: name, Logger: a.logger}
	if a.store.Remote() {
		f, err := topredis.New(topredis.Options{Client: a.store.client, KeyPrefix: a.settings.Redis.KeyPrefix,
			Instance: name, Interval: s.Publish, Logger: a.logger})
		if err != nil {
			return err
		}
		a.topFleet, opts.Peers = f, f
	}
	rec, err := top.New(opts)
	if err != nil {
		return err
	}
	a.top = rec
	return a.topMetrics(rec)
}

// topMetrics registers tollgate_rule_hottest_ratio{domain,rule}: per rule,
// the busiest value's hits in the last 60 s over what its limits allow
// in 60 s, the largest over the rule's limits, on this instance. Above 1,
// someone is pushing past the limit's rate, rejected or not. Labels are
// the rules', never a descriptor value.
func (a *App) topMetrics(rec *top.Recorder) error {
	_, err := a.telemetry.MeterProvider().Meter(meterName).Float64ObservableGauge("tollgate.rule.hottest_ratio",
		metric.WithDescription("Per rule, the busiest value's hits in the last 60 s over what the rule's limit allows in 60 s, on this instance: above 1, a client pushes past the limit's rate."),
		metric.WithUnit("1"),
		metric.WithFloat64Callback(func(ctx context.Context, o metric.Float64Observer) error {
			hottest := map[[2]string]float64{}
			for _, s := range rec.Rules(ctx, top.RulesQuery{Local: true}).Rules {
				if s.RequestsPerUnit == 0 {
					continue // an override: no limit of the rule's
				}
				k := [2]string{s.Domain, s.Rule}
				hottest[k] = max(hottest[k], s.HottestRatio)
			}
			for k, ratio := range hottest {
				o.Observe(ratio, metric.WithAttributes(attribute.String("domain", k[0]), attribute.String("rule", k[1])))
			}
			return nil
		}))
	return err
}

// instanceName names this instance in the fleet's summaries: the host's
// name and a random suffix, so that two processes on one host differ.
func instanceName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	if host == "" {
		return hex.EncodeToString(b[:])
	}
	return host + "-" + hex.EncodeToString(b[:])
}

// Top returns the heavy-hitter summaries of every rule, merged across
// the fleet with the Redis store, for the admin API; nil while
// --top-capacity is 0.
func (a *App) Top() *top.Recorder { return a.top }

// topObserver lets the limiter tell the summaries about every decision.
type topObserver struct{ rec *top.Recorder }

var _ limiter.Observer = topObserver{}

func (o topObserver) Rule(domain, rule, limit string, lim *descriptor.Limit) limiter.RuleObserver {
	return o.rec.Rule(domain, rule, limit, lim)
}
