package telemetry

import (
	"testing"
)

func TestTracingFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    bool
		wantErr string
	}{
		{name: "nothing set"},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, want: true},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317"}, want: true},
		{name: "exporter otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		{name: "exporter none beats endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{name: "sdk not disabled", env: map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		{
			name:    "unsupported exporter",
			env:     map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"},
			wantErr: "telemetry: OTEL_TRACES_EXPORTER=zipkin: only otlp and none are supported",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tracingFromEnv(func(k string) string { return tc.env[k] })
			if errString(err) != tc.wantErr {
				t.Fatalf("error = %v, want %q", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("tracing = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSpanExporterFromSettings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		env     map[string]string
		want    bool
		wantErr string
	}{
		{name: "off"},
		{name: "endpoint option", opts: Options{TracesEndpoint: "http://127.0.0.1:4317"}, want: true},
		{name: "endpoint option beats exporter none", opts: Options{TracesEndpoint: "http://127.0.0.1:4317"},
			env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, want: true},
		{name: "environment", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, want: true},
		{
			name:    "http protocol",
			env:     map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
			wantErr: "telemetry: OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf: only grpc is supported",
		},
		{
			name:    "traces protocol",
			opts:    Options{TracesEndpoint: "http://127.0.0.1:4317"},
			env:     map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			wantErr: "telemetry: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json: only grpc is supported",
		},
		{name: "grpc protocol", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp, err := spanExporter(t.Context(), tc.opts, func(k string) string { return tc.env[k] })
			if errString(err) != tc.wantErr {
				t.Fatalf("error = %v, want %q", err, tc.wantErr)
			}
			if exp != nil {
				if err := exp.Shutdown(t.Context()); err != nil {
					t.Errorf("Shutdown: %v", err)
				}
			}
			if got := exp != nil; got != tc.want {
				t.Errorf("exporter built = %v, want %v", got, tc.want)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
