package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tollgatehq/tollgate/pkg/telemetry"
)

func setup(t *testing.T, opts telemetry.Options) *telemetry.Telemetry {
	t.Helper()
	tel, err := telemetry.Setup(t.Context(), opts)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		if err := tel.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return tel
}

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", rec.Code)
	}
	body, err := io.ReadAll(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

func TestHandlerServesMeterProviderCounter(t *testing.T) {
	tel := setup(t, telemetry.Options{})
	counter, err := tel.MeterProvider().Meter("test").Int64Counter("tollgate.test.hits")
	if err != nil {
		t.Fatal(err)
	}
	counter.Add(t.Context(), 3, metric.WithAttributes(attribute.String("rule", "a")))
	counter.Add(t.Context(), 2, metric.WithAttributes(attribute.String("rule", "a")))

	body := scrape(t, tel.Handler())
	for _, want := range []string{
		`(?m)^tollgate_test_hits_total\{[^}]*rule="a"[^}]*\} 5$`,
		`(?m)^target_info\{[^}]*service_name="tollgate"[^}]*\} 1$`,
		`(?m)^go_goroutines \d+$`,
		`(?m)^process_start_time_seconds `,
		`(?m)^promhttp_metric_handler_requests_total\{code="200"\} \d+$`,
	} {
		if !regexp.MustCompile(want).MatchString(body) {
			t.Errorf("scrape has no line matching %s; got:\n%s", want, body)
		}
	}
}

// TestNoScopeLabels checks that the exporter adds no otel_scope_* labels
// to the series, nor an otel_scope_info series.
func TestNoScopeLabels(t *testing.T) {
	tel := setup(t, telemetry.Options{})
	counter, err := tel.MeterProvider().Meter("github.com/tollgatehq/tollgate/pkg/x", metric.WithInstrumentationVersion("v1")).
		Int64Counter("tollgate.test.hits")
	if err != nil {
		t.Fatal(err)
	}
	counter.Add(t.Context(), 1, metric.WithAttributes(attribute.String("rule", "a")))
	body := scrape(t, tel.Handler())
	if want := "\ntollgate_test_hits_total{rule=\"a\"} 1\n"; !strings.Contains(body, want) {
		t.Errorf("scrape lacks %q; got:\n%s", want, body)
	}
	if strings.Contains(body, "otel_scope") {
		t.Errorf("scrape names the instrumentation scope:\n%s", body)
	}
}

func TestBuildInfo(t *testing.T) {
	tests := []struct {
		name  string
		build telemetry.BuildInfo
		want  string // the series, "" for none
	}{
		{name: "unset"},
		{
			name:  "set",
			build: telemetry.BuildInfo{Version: "v1.2.3", Revision: "abc-modified", GoVersion: "go1.26.8"},
			want:  `tollgate_build_info{goversion="go1.26.8",revision="abc-modified",version="v1.2.3"} 1`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := scrape(t, setup(t, telemetry.Options{Build: tt.build}).Handler())
			got := regexp.MustCompile(`(?m)^tollgate_build_info.*$`).FindString(body)
			if got != tt.want {
				t.Errorf("build info series %q, want %q", got, tt.want)
			}
		})
	}
}

func TestServiceNameAndVersion(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	tel := setup(t, telemetry.Options{ServiceName: "edge-limits", ServiceVersion: "1.2.3"})
	body := scrape(t, tel.Handler())
	want := regexp.MustCompile(`(?m)^target_info\{[^}]*service_name="edge-limits",service_version="1.2.3"[^}]*\} 1$`)
	if !want.MatchString(body) {
		t.Errorf("target_info lacks the service name and version; got:\n%s", body)
	}
}

// TestOwnRegistry shows that Setup leaves the default Prometheus registry
// alone: two instances coexist, and neither one's metrics leak into the
// default registry or into each other.
func TestOwnRegistry(t *testing.T) {
	a := setup(t, telemetry.Options{})
	b := setup(t, telemetry.Options{})
	counter, err := a.MeterProvider().Meter("test").Int64Counter("tollgate.only.in.a")
	if err != nil {
		t.Fatal(err)
	}
	counter.Add(t.Context(), 1)

	name := regexp.MustCompile(`(?m)^tollgate_only_in_a_total`)
	if !name.MatchString(scrape(t, a.Handler())) {
		t.Fatal("instance a does not serve its own counter")
	}
	if name.MatchString(scrape(t, b.Handler())) {
		t.Error("instance b serves instance a's counter")
	}
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "tollgate_only_in_a_total" || f.GetName() == "target_info" {
			t.Errorf("default registry holds %s", f.GetName())
		}
	}
}

func TestTracingOffByDefault(t *testing.T) {
	for _, name := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(name, "")
	}
	tel := setup(t, telemetry.Options{})
	if tel.Tracing() {
		t.Error("Tracing() = true without an exporter")
	}
	_, span := tel.TracerProvider().Tracer("test").Start(t.Context(), "op")
	defer span.End()
	if span.IsRecording() {
		t.Error("span records although no exporter is configured")
	}
}

func TestSpansReachExporter(t *testing.T) {
	exp := &recordingExporter{}
	tel, err := telemetry.Setup(t.Context(), telemetry.Options{SpanExporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	if !tel.Tracing() {
		t.Error("Tracing() = false with an exporter")
	}
	_, span := tel.TracerProvider().Tracer("test").Start(t.Context(), "op")
	if !span.IsRecording() {
		t.Error("span does not record although an exporter is configured")
	}
	span.End()
	// Shutdown flushes the batch.
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	exp.mu.Lock()
	defer exp.mu.Unlock()
	if len(exp.spans) != 1 || exp.spans[0].Name() != "op" {
		t.Fatalf("exported %d spans, want one named op", len(exp.spans))
	}
	if v, ok := exp.spans[0].Resource().Set().Value("service.name"); !ok || v.AsString() != "tollgate" {
		t.Errorf("span resource service.name = %q, want tollgate", v.AsString())
	}
}

// recordingExporter keeps every span it is given, even after Shutdown.
type recordingExporter struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (e *recordingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.spans = append(e.spans, spans...)
	return nil
}

func (e *recordingExporter) Shutdown(context.Context) error { return nil }

func TestShutdownTwice(t *testing.T) {
	tel, err := telemetry.Setup(t.Context(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Fatalf("first Shutdown: %v", err)
	}
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}
