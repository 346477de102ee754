// Package telemetry builds tollgate's OpenTelemetry providers: a meter
// provider exported in the Prometheus format, and a tracer provider whose
// spans go over OTLP/gRPC.
//
// Nothing here touches global state. The Prometheus exporter registers on
// a registry of its own, never prometheus.DefaultRegisterer, and the
// providers are handed to the packages that need them rather than set with
// otel.SetMeterProvider, so several instances can live in one process, as
// tests do.
//
// # Tracing
//
// Tracing is off unless something asks for it: Options.SpanExporter,
// Options.TracesEndpoint, or the standard environment, which is
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT set,
// or OTEL_TRACES_EXPORTER=otlp (whose endpoint defaults to
// localhost:4317). OTEL_TRACES_EXPORTER=none and OTEL_SDK_DISABLED=true
// turn the environment's request off; an explicit option still wins. Off,
// TracerProvider is a no-op provider and Tracing reports false, so callers
// can skip tracing entirely. On, the OTLP/gRPC exporter also takes its
// headers, TLS files, compression and timeout from the standard
// OTEL_EXPORTER_OTLP_* variables. Only the grpc protocol is supported:
// OTEL_EXPORTER_OTLP_PROTOCOL (or _TRACES_PROTOCOL) naming another is an
// error rather than spans sent to a port that does not speak it.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
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
	// SpanExporter receives finished spans in batches; it turns tracing on
	// and wins over TracesEndpoint and the environment. Nil means an
	// OTLP/gRPC exporter when TracesEndpoint or the environment asks for
	// one (see the package documentation), else tracing is off.
	SpanExporter sdktrace.SpanExporter
	// TracesEndpoint is the URL of the OTLP/gRPC receiver spans are sent
	// to, such as "http://otel-collector:4317" (http: plaintext, https:
	// TLS). Set, it turns tracing on whatever the environment says.
	TracesEndpoint string
	// Sampler decides which new traces are sampled. Nil means the one
	// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG name, else the SDK's
	// default: parent-based, every root sampled.
	Sampler sdktrace.Sampler
	// BatchTimeout is the longest a finished span waits before it is
	// exported. Zero means OTEL_BSP_SCHEDULE_DELAY, else 5 seconds.
	BatchTimeout time.Duration
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
	registry      *prometheus.Registry
	meterProvider *sdkmetric.MeterProvider
	// tracerProvider is nil while tracing is off.
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

	spans, err := spanExporter(ctx, opts, os.Getenv)
	if err != nil {
		_ = meterProvider.Shutdown(ctx)
		return nil, err
	}
	var tracerProvider *sdktrace.TracerProvider
	if spans != nil {
		var batch []sdktrace.BatchSpanProcessorOption
		if opts.BatchTimeout > 0 {
			batch = append(batch, sdktrace.WithBatchTimeout(opts.BatchTimeout))
		}
		traceOpts := []sdktrace.TracerProviderOption{
			sdktrace.WithResource(res),
			sdktrace.WithBatcher(spans, batch...),
		}
		if opts.Sampler != nil {
			traceOpts = append(traceOpts, sdktrace.WithSampler(opts.Sampler))
		}
		tracerProvider = sdktrace.NewTracerProvider(traceOpts...)
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
		tracerProvider: tracerProvider,
		handler:        handler,
	}, nil
}

// spanExporter returns the exporter opts and the environment read through
// getenv ask for, or nil when tracing is off.
func spanExporter(ctx context.Context, opts Options, getenv func(string) string) (sdktrace.SpanExporter, error) {
	if opts.SpanExporter != nil {
		return opts.SpanExporter, nil
	}
	var grpcOpts []otlptracegrpc.Option
	if opts.TracesEndpoint != "" {
		grpcOpts = append(grpcOpts, otlptracegrpc.WithEndpointURL(opts.TracesEndpoint))
	} else {
		on, err := tracingFromEnv(getenv)
		if !on || err != nil {
			return nil, err
		}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(name); p != "" && p != "grpc" {
			return nil, fmt.Errorf("telemetry: %s=%s: only grpc is supported", name, p)
		}
	}
	exp, err := otlptracegrpc.New(ctx, grpcOpts...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: creating OTLP trace exporter: %w", err)
	}
	return exp, nil
}

// tracingFromEnv reports whether the standard environment asks for spans
// to be exported over OTLP.
func tracingFromEnv(getenv func(string) string) (bool, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
		return getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%s: only otlp and none are supported", exp)
	}
}

// MeterProvider returns the provider whose metrics Handler serves.
func (t *Telemetry) MeterProvider() metric.MeterProvider { return t.meterProvider }

// TracerProvider returns the tracer provider: one that exports its spans
// when Tracing reports true, else a no-op provider.
func (t *Telemetry) TracerProvider() trace.TracerProvider {
	if t.tracerProvider == nil {
		return noop.NewTracerProvider()
	}
	return t.tracerProvider
}

// Tracing reports whether spans are exported. Callers on a hot path skip
// starting spans when it is false, since even a no-op span costs a
// context.
func (t *Telemetry) Tracing() bool { return t.tracerProvider != nil }

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
		var traceErr error
		if t.tracerProvider != nil {
			traceErr = t.tracerProvider.Shutdown(ctx)
		}
		t.shutdownErr = errors.Join(traceErr, t.meterProvider.Shutdown(ctx))
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
