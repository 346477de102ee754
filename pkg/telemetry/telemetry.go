// Package telemetry builds tollgate's OpenTelemetry providers: a meter
// provider exported in the Prometheus format, and a tracer provider.
//
// Nothing here touches global state. The Prometheus exporter registers on
// a registry of its own, never prometheus.DefaultRegisterer, and the
// providers are handed to the packages that need them rather than set with
// otel.SetMeterProvider, so several instances can live in one process, as
// tests do.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is the service.name used when Options.ServiceName is
// empty.
const DefaultServiceName = "tollgate"

// Options configures Setup. The zero value works.
type Options struct {
	// ServiceName is the service.name resource attribute. Empty means
	// DefaultServiceName. OTEL_SERVICE_NAME, when set, wins, as do the
	// attributes in OTEL_RESOURCE_ATTRIBUTES.
	ServiceName string
	// Build, when its Version is set, is served as the gauge
	// tollgate_build_info{version,revision,goversion} with the value 1, the
	// Prometheus convention for telling which build a target runs.
	Build BuildInfo
	// ServiceVersion is the service.version resource attribute; empty
	// leaves it out.
	ServiceVersion string
	// SpanExporter receives finished spans in batches. Nil means tracing
	// is off: the tracer provider samples nothing, so spans cost little,
	// record nothing and export nothing, though trace context still
	// propagates through them. With an exporter, every span is sampled
	// unless its parent was not.
	SpanExporter sdktrace.SpanExporter
	// Logger receives errors met while serving /metrics. Nil discards them.
	Logger *slog.Logger
}

// BuildInfo names the running build.
type BuildInfo struct {
	// Version is the release, such as v1.2.3.
	Version string
	// Revision is the VCS commit the build came from.
	Revision string
	// GoVersion is the Go toolchain that built it, such as go1.26.8.
	GoVersion string
}

// Telemetry owns the meter and tracer providers and the Prometheus
// registry behind the metrics endpoint.
type Telemetry struct {
	registry       *prometheus.Registry
	meterProvider  *sdkmetric.MeterProvider
	tracerProvider *sdktrace.TracerProvider
	handler        http.Handler

	shutdownOnce sync.Once
	shutdownErr  error
}

// Setup builds the providers. The meter provider's metrics, Go runtime
// metrics and process metrics are served by Handler. Call Shutdown when
// done.
func Setup(ctx context.Context, opts Options) (*Telemetry, error) {
	name := opts.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", name)}
	if opts.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", opts.ServiceVersion))
	}
	// Later detectors win: the environment overrides the options.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attrs...),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: building resource: %w", err)
	}

	registry := prometheus.NewRegistry()
	if err := registry.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("telemetry: registering Go collector: %w", err)
	}
	if err := registry.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("telemetry: registering process collector: %w", err)
	}
	if opts.Build.Version != "" {
		if err := registry.Register(buildInfo(opts.Build)); err != nil {
			return nil, fmt.Errorf("telemetry: registering build info: %w", err)
		}
	}
	// Without scope info, series carry no otel_scope_* labels: every
	// instrument has one scope, so they only repeat the package name. The
	// resource stays, once, in target_info.
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("telemetry: creating Prometheus exporter: %w", err)
	}
	meterProvider := sdkmetric.NewMeterProvider(
		sdkmetric.WithResource(res),
		sdkmetric.WithReader(exporter),
	)

	traceOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if opts.SpanExporter != nil {
		traceOpts = append(traceOpts,
			sdktrace.WithBatcher(opts.SpanExporter),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	} else {
		traceOpts = append(traceOpts, sdktrace.WithSampler(sdktrace.NeverSample()))
	}

	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	handler := promhttp.InstrumentMetricHandler(registry, promhttp.HandlerFor(registry, promhttp.HandlerOpts{
		ErrorLog:      promLogger{logger.With(slog.String("component", "telemetry"))},
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      registry,
	}))

	return &Telemetry{
		registry:       registry,
		meterProvider:  meterProvider,
		tracerProvider: sdktrace.NewTracerProvider(traceOpts...),
		handler:        handler,
	}, nil
}

// MeterProvider returns the provider whose metrics Handler serves.
func (t *Telemetry) MeterProvider() metric.MeterProvider { return t.meterProvider }

// TracerProvider returns the tracer provider. See Options.SpanExporter for
// what it does with spans.
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tracerProvider }

// Handler serves the metrics in the Prometheus exposition format, whatever
// the request path; mount it at /metrics.
func (t *Telemetry) Handler() http.Handler { return t.handler }

// Registry returns the Prometheus registry behind Handler, for collectors
// that are not written with OpenTelemetry.
func (t *Telemetry) Registry() *prometheus.Registry { return t.registry }

// Shutdown flushes pending spans and stops both providers. Later calls
// return the first call's result.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.shutdownOnce.Do(func() {
		t.shutdownErr = errors.Join(
			t.tracerProvider.Shutdown(ctx),
			t.meterProvider.Shutdown(ctx),
		)
	})
	return t.shutdownErr
}

// buildInfo returns the tollgate_build_info gauge of b.
func buildInfo(b BuildInfo) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_build_info",
		Help: "Always 1; the labels name the version, the VCS revision and the Go version of the running build.",
		ConstLabels: prometheus.Labels{
			"version":   b.Version,
			"revision":  b.Revision,
			"goversion": b.GoVersion,
		},
	})
	g.Set(1)
	return g
}

// promLogger passes promhttp's error messages to slog.
type promLogger struct{ log *slog.Logger }

// Println logs v as one error.
func (l promLogger) Println(v ...any) {
	l.log.Error("serving metrics", slog.String("error", fmt.Sprint(v...)))
}
