package redis

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the Redis store's instruments.
const meterName = "github.com/tollgatehq/tollgate/pkg/store/redis"

// metrics holds the Redis store's instruments.
type metrics struct {
	roundTrips  metric.Int64Counter
	scriptCalls metric.Int64Counter
	batchSize   metric.Int64Histogram
	errors      metric.Int64Counter
	loads       metric.Int64Counter
	refunds     metric.Int64Counter

	// The reason attribute of tollgate_redis_errors.
	redisError, contextError, closedError metric.AddOption
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	meter := mp.Meter(meterName)
	m := &metrics{
		redisError:   metric.WithAttributes(attribute.String("reason", "redis")),
		contextError: metric.WithAttributes(attribute.String("reason", "context")),
		closedError:  metric.WithAttributes(attribute.String("reason", "closed")),
	}
	var errs [6]error
	m.roundTrips, errs[0] = meter.Int64Counter("tollgate_redis_round_trips",
		metric.WithDescription("Pipelines, or single commands, sent to Redis; a Cluster pipeline reaches every node it names at once."),
		metric.WithUnit("{round_trip}"))
	m.scriptCalls, errs[1] = meter.Int64Counter("tollgate_redis_script_calls",
		metric.WithDescription("Script calls sent to Redis, each carrying the slot groups of one or more Applies in one slot; refunds and NOSCRIPT retries included."),
		metric.WithUnit("{call}"))
	m.batchSize, errs[2] = meter.Int64Histogram("tollgate_redis_batch_size",
		metric.WithDescription("Slot groups (the hits of one Apply in one slot) per round trip."),
		metric.WithUnit("{group}"),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256))
	m.errors, errs[3] = meter.Int64Counter("tollgate_redis_errors",
		metric.WithDescription("Batches the Redis store could not decide, by reason: redis (an error from Redis or the network), context (the caller's deadline or cancellation) or closed."),
		metric.WithUnit("{error}"))
	m.loads, errs[4] = meter.Int64Counter("tollgate_redis_script_loads",
		metric.WithDescription("Loads of the decision script (SCRIPT LOAD, or FUNCTION LOAD where Redis has Functions), the first included; more mean Redis lost it (NOSCRIPT)."),
		metric.WithUnit("{load}"))
	m.refunds, errs[5] = meter.Int64Counter("tollgate_redis_refunds",
		metric.WithDescription("Hits refunded because another slot group of their batch was rejected or failed."),
		metric.WithUnit("{hit}"))
	return m, errors.Join(errs[:]...)
}

// failed counts a batch the store could not decide.
func (m *metrics) failed(ctx context.Context, reason metric.AddOption) {
	m.errors.Add(ctx, 1, reason)
}
