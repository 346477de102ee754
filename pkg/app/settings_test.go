package app

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

func TestSettingsPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(file, []byte("grpc-addr: 127.0.0.1:1001\nhttp-addr: 127.0.0.1:2001\nlog-level: warn\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want func(Settings) string // returns "" when the settings are as expected
	}{
		{
			name: "defaults",
			want: func(s Settings) string {
				return expect(s.Listen.GRPC == ":8081" && s.Listen.HTTP == ":8080" && s.Listen.Admin == "127.0.0.1:8082" && s.Listen.Debug == "127.0.0.1:6070" &&
					s.Store == "memory" && s.Rules.DefaultAlgorithm == "token_bucket" && s.Answers.Headers == "xratelimit" &&
					!s.Answers.DynamicMetadata && s.Answers.DecisionMetadata && s.Rules.Precision == "strict" &&
					s.Leases.Interval == 100*time.Millisecond && s.Leases.Lifetime == 0 && s.Values.view() == descriptor.ValuesPlain, s)
			},
		},
		{
			name: "dynamic metadata from the environment",
			env:  map[string]string{"TOLLGATE_RESPONSE_DYNAMIC_METADATA": "true", "TOLLGATE_DECISION_METADATA": "false"},
			want: func(s Settings) string {
				return expect(s.Answers.DynamicMetadata && !s.Answers.DecisionMetadata, s)
			},
		},
		{
			name: "file over defaults",
			args: []string{"--settings", file},
			want: func(s Settings) string {
				return expect(s.Listen.GRPC == "127.0.0.1:1001" && s.Log.Level == "warn" && s.Store == "memory", s)
			},
		},
		{
			name: "environment over file",
			args: []string{"--settings", file},
			env:  map[string]string{"TOLLGATE_GRPC_ADDR": "127.0.0.1:1002", "TOLLGATE_SHADOW_MODE": "true"},
			want: func(s Settings) string {
				return expect(s.Listen.GRPC == "127.0.0.1:1002" && s.Listen.HTTP == "127.0.0.1:2001" && s.Rules.ShadowMode, s)
			},
		},
		{
			name: "list from flag and from environment",
			args: []string{"--redis-addrs", "a:1,b:2"},
			env:  map[string]string{"TOLLGATE_REDIS_ADDRS": "c:3"},
			want: func(s Settings) string {
				return expect(len(s.Redis.Addrs) == 2 && s.Redis.Addrs[1] == "b:2", s)
			},
		},
		{
			name: "list from environment",
			env:  map[string]string{"TOLLGATE_REDIS_ADDRS": "c:3,d:4"},
			want: func(s Settings) string {
				return expect(len(s.Redis.Addrs) == 2 && s.Redis.Addrs[0] == "c:3", s)
			},
		},
		{
			name: "tracing from environment",
			env: map[string]string{
				"TOLLGATE_TRACING_ENDPOINT": "https://collector:4317", "TOLLGATE_TRACING_SAMPLE_RATIO": "0.25",
				"TOLLGATE_TRACING_BATCH_TIMEOUT": "100ms",
			},
			want: func(s Settings) string {
				return expect(s.Tracing.Endpoint == "https://collector:4317" && s.Tracing.SampleRatio == 0.25 &&
					s.Tracing.BatchTimeout == 100*time.Millisecond, s)
			},
		},
		{
			name: "gRPC TLS from the environment",
			env: map[string]string{"TOLLGATE_GRPC_TLS_CERT": "/tls/tls.crt", "TOLLGATE_GRPC_TLS_KEY": "/tls/tls.key",
				"TOLLGATE_GRPC_TLS_CLIENT_CA": "/tls/ca.crt", "TOLLGATE_GRPC_TLS_CLIENT_SAN": "envoy.gateway.svc"},
			want: func(s Settings) string {
				return expect(s.GRPCTLS.Cert == "/tls/tls.crt" && s.GRPCTLS.Key == "/tls/tls.key" &&
					s.GRPCTLS.ClientCA == "/tls/ca.crt" && s.GRPCTLS.ClientSAN == "envoy.gateway.svc", s)
			},
		},
		{
			name: "descriptor values from the environment",
			env:  map[string]string{"TOLLGATE_DESCRIPTOR_VALUES": "hash"},
			want: func(s Settings) string { return expect(s.Values.view() == descriptor.ValuesHash, s) },
		},
		{
			name: "over-limit cache from the environment",
			env:  map[string]string{"TOLLGATE_OVER_LIMIT_CACHE_BYTES": "1048576"},
			want: func(s Settings) string { return expect(s.Redis.OverLimitCacheBytes == 1<<20, s) },
		},
		{
			name: "precision and leases from the environment",
			env:  map[string]string{"TOLLGATE_PRECISION": "cached", "TOLLGATE_LEASE_INTERVAL": "50ms", "TOLLGATE_LEASE_LIFETIME": "1s"},
			want: func(s Settings) string {
				return expect(s.Rules.Precision == "cached" && s.Leases.Interval == 50*time.Millisecond && s.Leases.Lifetime == time.Second, s)
			},
		},
		{
			name: "top summaries: on by default",
			want: func(s Settings) string {
				return expect(s.Top.Capacity == 64 && s.Top.Publish == 5*time.Second, s)
			},
		},
		{
			name: "top summaries from the environment and a flag",
			args: []string{"--top-capacity", "0"},
			env:  map[string]string{"TOLLGATE_TOP_CAPACITY": "128", "TOLLGATE_TOP_PUBLISH_INTERVAL": "2s"},
			want: func(s Settings) string { return expect(s.Top.Capacity == 0 && s.Top.Publish == 2*time.Second, s) },
		},
		{
			name: "recorder: off, recording from the start once on",
			want: func(s Settings) string {
				return expect(s.Record == RecordSettings{Sample: 1, MaxBytes: 1 << 30, OnStart: true}, s)
			},
		},
		{
			name: "recorder",
			args: []string{"--record-file", "/var/lib/tollgate/calls.jsonl", "--record-sample", "0.25", "--record-key", "user"},
			env:  map[string]string{"TOLLGATE_RECORD_MAX_BYTES": "1048576", "TOLLGATE_RECORD_ON_START": "false"},
			want: func(s Settings) string {
				return expect(s.Record == RecordSettings{File: "/var/lib/tollgate/calls.jsonl", Sample: 0.25, Key: "user", MaxBytes: 1 << 20}, s)
			},
		},
		{
			name: "shadow rules: off",
			want: func(s Settings) string { return expect(s.Shadow == ShadowSettings{}, s) },
		},
		{
			name: "shadow rules from the environment",
			env:  map[string]string{"TOLLGATE_SHADOW_CONFIG_DIR": "/etc/tollgate/shadow"},
			want: func(s Settings) string { return expect(s.Shadow.ConfigDir == "/etc/tollgate/shadow", s) },
		},
		{
			name: "shadow rules from a flag",
			args: []string{"--shadow-config-dir", "shadow"},
			want: func(s Settings) string { return expect(s.Shadow.ConfigDir == "shadow", s) },
		},
		{
			name: "flag over environment",
			args: []string{"--settings", file, "--grpc-addr", "127.0.0.1:1003", "--memory-max-keys", "5"},
			env:  map[string]string{"TOLLGATE_GRPC_ADDR": "127.0.0.1:1002", "TOLLGATE_MEMORY_MAX_KEYS": "7"},
			want: func(s Settings) string {
				return expect(s.Listen.GRPC == "127.0.0.1:1003" && s.Limits.MemoryMaxKeys == 5, s)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := load(t, tt.env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if msg := tt.want(s); msg != "" {
				t.Error(msg)
			}
		})
	}
}

func TestRedisPassword(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"environment", nil, map[string]string{"TOLLGATE_REDIS_PASSWORD": "from-env"}, "from-env"},
		{"file wins", []string{"--redis-password-file", file}, map[string]string{"TOLLGATE_REDIS_PASSWORD": "from-env"}, "from-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := load(t, tt.env, append(tt.args, "--store", "redis")...)
			if err != nil {
				t.Fatal(err)
			}
			if string(s.Redis.Password) != tt.want {
				t.Fatalf("password %q, want %q", string(s.Redis.Password), tt.want)
			}
			var logged strings.Builder
			slog.New(slog.NewTextHandler(&logged, nil)).Info("settings", "settings", s, "password", s.Redis.Password)
			for _, out := range []string{fmt.Sprintf("%v %+v %#v %s", s, s, s, s.Redis.Password), logged.String()} {
				if strings.Contains(out, tt.want) {
					t.Fatalf("the password leaks into %q", out)
				}
			}
		})
	}
}

// TestFleetHMACKey checks how --fleet-hmac-key-file is read: one
// trailing newline dropped, the file named by the flag or
// TOLLGATE_FLEET_HMAC_KEY_FILE, a short key or a missing file refused
// with the error given, and the key never printed with the settings.
func TestFleetHMACKey(t *testing.T) {
	const key = "fleet-key-0123456789abcdef012345" // 32 bytes
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    string // the key, if no error
		wantErr string
	}{
		{name: "none"},
		{name: "newline", args: []string{"--fleet-hmac-key-file", file("nl", key+"\n")}, want: key},
		{name: "crlf", args: []string{"--fleet-hmac-key-file", file("crlf", key+"\r\n")}, want: key},
		{name: "no newline", args: []string{"--fleet-hmac-key-file", file("bare", key)}, want: key},
		{name: "one newline only", args: []string{"--fleet-hmac-key-file", file("two", key+"\n\n")}, want: key + "\n"},
		{name: "environment", env: map[string]string{"TOLLGATE_FLEET_HMAC_KEY_FILE": file("env", key+"\n")}, want: key},
		{name: "short", args: []string{"--fleet-hmac-key-file", file("short", key[:31]+"\n")},
			wantErr: "fleet-hmac-key-file: the key is 31 bytes long; at least 32 are needed (openssl rand -hex 32 writes one)"},
		{name: "empty", args: []string{"--fleet-hmac-key-file", file("empty", "\n")},
			wantErr: "fleet-hmac-key-file: the key is 0 bytes long; at least 32 are needed (openssl rand -hex 32 writes one)"},
		{name: "missing", args: []string{"--fleet-hmac-key-file", filepath.Join(dir, "missing")},
			wantErr: "fleet-hmac-key-file: open " + filepath.Join(dir, "missing") + ": no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := load(t, tt.env, append(tt.args, "--store", "redis")...)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(s.Fleet.HMACKey) != tt.want {
				t.Fatalf("key %q, want %q", string(s.Fleet.HMACKey), tt.want)
			}
			if k, err := s.Fleet.key(); err != nil || (k == nil) != (tt.want == "") {
				t.Fatalf("key() = %v, %v", k, err)
			}
			var logged strings.Builder
			slog.New(slog.NewTextHandler(&logged, nil)).Info("settings", "settings", s, "key", s.Fleet.HMACKey)
			for _, out := range []string{fmt.Sprintf("%v %+v %#v %s", s, s, s, s.Fleet.HMACKey), logged.String()} {
				if strings.Contains(out, "0123456789abcdef") {
					t.Fatalf("the key leaks into %q", out)
				}
			}
		})
	}
}

func expect(ok bool, s Settings) string {
	if ok {
		return ""
	}
	return fmt.Sprintf("unexpected settings: %+v", s)
}

func TestSettingsErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--store", "etcd"}, `store: unknown store "etcd" (want memory or redis)`},
		{[]string{"--trusted-sources", "grpc,udp"}, `trusted-sources: unknown source "udp" (want grpc, http or san:NAME)`},
		{[]string{"--trusted-sources", "san:"}, `trusted-sources: "san:" names no subject alternative name`},
		{[]string{"--trusted-sources", "grpc,san:envoy"}, `trusted-sources: "san:envoy" with grpc, which trusts every gRPC caller`},
		{[]string{"--trusted-sources", "san:envoy"}, `trusted-sources: san:NAME needs grpc-tls-client-ca`},
		{[]string{"--default-algorithm", "leaky"}, `default-algorithm: unknown algorithm "leaky"`},
		{[]string{"--default-charge", "sometimes"}, `default-charge: unknown charge "sometimes" (want admitted or always)`},
		{[]string{"--precision", "exact"}, `precision: unknown precision "exact" (want strict or cached)`},
		{[]string{"--http-read-timeout", "-1s"}, `http-read-timeout: must not be negative, got -1s`},
		{[]string{"--http-write-timeout", "-1s"}, `http-write-timeout: must not be negative, got -1s`},
		{[]string{"--http-idle-timeout", "-1m"}, `http-idle-timeout: must not be negative, got -1m0s`},
		{[]string{"--http-max-connections", "-1"}, `http-max-connections: must not be negative, got -1`},
		{[]string{"--grpc-max-connection-age", "-5m"}, `grpc-max-connection-age: must not be negative, got -5m0s`},
		{[]string{"--grpc-max-connection-age-grace", "-1s"}, `grpc-max-connection-age-grace: must not be negative, got -1s`},
		{[]string{"--grpc-keepalive-min-time", "0s"}, `grpc-keepalive-min-time: must be positive, got 0s`},
		{[]string{"--grpc-max-concurrent-streams", "0"}, `grpc-max-concurrent-streams: must be positive, got 0`},
		{[]string{"--grpc-max-concurrent-streams", "2147483648"}, `grpc-max-concurrent-streams: must be at most 2147483647, got 2147483648`},
		{[]string{"--lease-interval", "0s"}, `lease-interval: must be positive, got 0s`},
		{[]string{"--lease-lifetime", "-1ms"}, `lease-lifetime: must not be negative, got -1ms`},
		{[]string{"--response-headers", "fancy"}, `response-headers:`},
		{[]string{"--log-format", "xml"}, `log-format: unknown format "xml" (want text or json)`},
		{[]string{"--log-level", "loud"}, `log-level:`},
		{[]string{"--descriptor-values", "redacted"}, `descriptor-values: unknown value view "redacted" (want plain or hash)`},
		{[]string{"--max-descriptors", "0"}, `max-descriptors: must be positive, got 0`},
		{[]string{"--over-limit-cache-bytes", "-1"}, `over-limit-cache-bytes: must not be negative, got -1`},
		{[]string{"--config-dir", ""}, `config-dir: must not be empty`},
		{[]string{"--failure-mode", "maybe"}, `failure-mode: unknown failure mode "maybe" (want open, closed or local)`},
		{[]string{"--store-timeout", "0s"}, `store-timeout: must be positive, got 0s`},
		{[]string{"--deadline-margin", "0s"}, `deadline-margin: must be positive, got 0s`},
		{[]string{"--breaker-open-time", "-1s"}, `breaker-open-time: must be positive, got -1s`},
		{[]string{"--breaker-failures", "0"}, `breaker-failures: must be positive, got 0`},
		{[]string{"--breaker-failures", "4294967296"}, `breaker-failures: must be at most 1000000, got 4294967296`},
		{[]string{"--breaker-probes", "0"}, `breaker-probes: must be positive, got 0`},
		{[]string{"--local-fallback-share", "0"}, `local-fallback-share: must be positive, got 0`},
		{[]string{"--local-fallback-max-keys", "-1"}, `local-fallback-max-keys: must be positive, got -1`},
		{[]string{"--max-hits", "0"}, `max-hits: must be positive, got 0`},
		{[]string{"--max-patterns", "0"}, `max-patterns: must be positive, got 0`},
		{[]string{"--top-capacity", "-1"}, `top-capacity: must be between 0 (off) and 65536, got -1`},
		{[]string{"--top-capacity", "65537"}, `top-capacity: must be between 0 (off) and 65536, got 65537`},
		{[]string{"--top-publish-interval", "0s"}, `top-publish-interval: must be positive, got 0s`},
		{[]string{"--record-sample", "0"}, `record-sample: must be in (0, 1], got 0`},
		{[]string{"--record-sample", "1.5"}, `record-sample: must be in (0, 1], got 1.5`},
		{[]string{"--record-sample", "NaN"}, `record-sample: must be in (0, 1], got NaN`},
		{[]string{"--record-max-bytes", "4095"}, `record-max-bytes: must be at least 4096, got 4095`},
		{[]string{"--tracing-endpoint", "collector:4317"}, `tracing-endpoint: want an http:// or https:// URL such as http://otel-collector:4317, got "collector:4317"`},
		{[]string{"--tracing-endpoint", "grpc://collector:4317"}, `tracing-endpoint: want an http:// or https:// URL such as http://otel-collector:4317, got "grpc://collector:4317"`},
		{[]string{"--tracing-sample-ratio", "1.5"}, `tracing-sample-ratio: must be between 0 and 1, got 1.5`},
		{[]string{"--tracing-sample-ratio", "NaN"}, `tracing-sample-ratio: must be between 0 and 1, got NaN`},
		{[]string{"--tracing-batch-timeout", "-1s"}, `tracing-batch-timeout: must not be negative, got -1s`},
		{[]string{"--settings", "/nonexistent/tollgate.yaml"}, `reading settings file /nonexistent/tollgate.yaml`},
		{[]string{"--grpc-tls-cert", "tls.crt"}, `grpc-tls-cert, grpc-tls-key: set both or neither`},
		{[]string{"--grpc-tls-key", "tls.key"}, `grpc-tls-cert, grpc-tls-key: set both or neither`},
		{[]string{"--grpc-tls-client-ca", "ca.crt"}, `grpc-tls-client-ca: needs grpc-tls-cert and grpc-tls-key`},
		{[]string{"--grpc-tls-cert", "tls.crt", "--grpc-tls-key", "tls.key", "--grpc-tls-client-san", "envoy"},
			`grpc-tls-client-san: needs grpc-tls-client-ca`},
		{[]string{"--admin-tls-key", "tls.key"}, `admin-tls-cert, admin-tls-key: set both or neither`},
		{[]string{"--admin-tls-client-ca", "ca.crt"}, `admin-tls-client-ca: needs admin-tls-cert and admin-tls-key`},
		{[]string{"--admin-tls-cert", "tls.crt", "--admin-tls-key", "tls.key", "--admin-tls-client-san", "ops"},
			`admin-tls-client-san: needs admin-tls-client-ca`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := load(t, nil, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestTracingSampler(t *testing.T) {
	tests := []struct {
		ratio float64
		want  string // the sampler's description; "" for none
	}{
		{1, ""},
		{0.25, "ParentBased{root:TraceIDRatioBased{0.25},remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"},
		{0, "ParentBased{root:TraceIDRatioBased{0},remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.ratio), func(t *testing.T) {
			s := TracingSettings{Endpoint: "http://c:4317", SampleRatio: tt.ratio, BatchTimeout: time.Second}
			opts := s.telemetryOptions()
			got := ""
			if opts.Sampler != nil {
				got = opts.Sampler.Description()
			}
			if got != tt.want {
				t.Errorf("sampler %q, want %q", got, tt.want)
			}
			if opts.TracesEndpoint != "http://c:4317" || opts.BatchTimeout != time.Second {
				t.Errorf("options %+v do not carry the endpoint and batch timeout", opts)
			}
		})
	}
}

// TestDefaultCharge checks where --default-charge comes from: admitted by
// default; always in envoyproxy/ratelimit's environment and with rules
// over xDS, logged once, unless a flag, TOLLGATE_DEFAULT_CHARGE or the
// settings file names a charge; and that it reaches the descriptor
// options.
func TestDefaultCharge(t *testing.T) {
	dir := t.TempDir()
	admittedFile := filepath.Join(dir, "admitted.yaml")
	alwaysFile := filepath.Join(dir, "always.yaml")
	for name, data := range map[string]string{admittedFile: "default-charge: admitted\n", alwaysFile: "default-charge: always\n"} {
		if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const (
		xdsLine = `level=INFO msg="rules over xDS: default charge always, as envoyproxy/ratelimit counts (--default-charge admitted opts out)"`
		envLine = `level=INFO msg="envoyproxy/ratelimit environment: default algorithm fixed_window, default charge always, as envoyproxy/ratelimit counts"`
		algLine = `level=INFO msg="envoyproxy/ratelimit environment: default algorithm fixed_window, as envoyproxy/ratelimit counts"`
	)
	ratelimitEnv := map[string]string{"RUNTIME_ROOT": "/d"}
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		want     algorithm.Charge
		wantLine string // the start-up line about defaults; "" for none
	}{
		{name: "default", want: algorithm.ChargeAdmitted},
		{name: "flag", args: []string{"--default-charge", "always"}, want: algorithm.ChargeAlways},
		{name: "flag in any case", args: []string{"--default-charge", "ALWAYS"}, want: algorithm.ChargeAlways},
		{name: "environment", env: map[string]string{"TOLLGATE_DEFAULT_CHARGE": "always"}, want: algorithm.ChargeAlways},
		{name: "settings file", args: []string{"--settings", alwaysFile}, want: algorithm.ChargeAlways},
		{name: "xds", args: []string{"--config-type", "xds"}, want: algorithm.ChargeAlways, wantLine: xdsLine},
		{name: "xds from the environment", env: map[string]string{"TOLLGATE_CONFIG_TYPE": "xds"}, want: algorithm.ChargeAlways, wantLine: xdsLine},
		{name: "xds, flag admitted", args: []string{"--config-type", "xds", "--default-charge", "admitted"}, want: algorithm.ChargeAdmitted},
		{name: "xds, environment admitted", args: []string{"--config-type", "xds"}, env: map[string]string{"TOLLGATE_DEFAULT_CHARGE": "admitted"}, want: algorithm.ChargeAdmitted},
		{name: "xds, settings file admitted", args: []string{"--config-type", "xds", "--settings", admittedFile}, want: algorithm.ChargeAdmitted},
		{name: "ratelimit's environment", env: ratelimitEnv, want: algorithm.ChargeAlways, wantLine: envLine},
		{name: "ratelimit's environment, flag admitted", args: []string{"--default-charge", "admitted"}, env: ratelimitEnv, want: algorithm.ChargeAdmitted, wantLine: algLine},
		{name: "ratelimit's environment, settings file admitted", args: []string{"--settings", admittedFile}, env: ratelimitEnv, want: algorithm.ChargeAdmitted, wantLine: algLine},
		{
			name: "ratelimit's environment over xDS",
			env:  map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "eg:18001"},
			want: algorithm.ChargeAlways, wantLine: envLine,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := load(t, tt.env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			opts, err := s.descriptorOptions()
			if err != nil {
				t.Fatal(err)
			}
			if opts.DefaultCharge != tt.want {
				t.Errorf("DefaultCharge = %v (setting %q), want %v", opts.DefaultCharge, s.Rules.DefaultCharge, tt.want)
			}
			var buf strings.Builder
			s.ratelimitEnv.Log(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}})))
			var lines []string
			for line := range strings.Lines(buf.String()) {
				if strings.Contains(line, "default ") {
					lines = append(lines, strings.TrimSuffix(line, "\n"))
				}
			}
			var want []string
			if tt.wantLine != "" {
				want = []string{tt.wantLine}
			}
			if !slices.Equal(lines, want) {
				t.Errorf("lines about defaults:\n got %q\nwant %q", lines, want)
			}
		})
	}
}

// load resolves the settings of serve's command line args in the
// environment env, as serve would.
func load(t *testing.T, env map[string]string, args ...string) (Settings, error) {
	t.Helper()
	fs := Flags(pflag.NewFlagSet("tollgate serve", pflag.ContinueOnError))
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return LoadSettings(fs, func(k string) string { return env[k] })
}

func TestXDSSettingsErrors(t *testing.T) {
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--config-type", "grpc"}, want: `config-type: unknown type "grpc" (want file or xds)`},
		{args: []string{"--config-type", "xds", "--xds-node-metadata", `{"a":1}`}, want: "xds-node-metadata: want a JSON object of strings: json: cannot unmarshal number into Go value of type string"},
		{args: []string{"--config-type", "xds", "--xds-headers", "x-a=1,broken"}, want: `xds-headers: "broken" is not name=value`},
		{args: []string{"--config-type", "xds", "--xds-retry-interval", "0s"}, want: "xds-retry-interval: must be positive, got 0s"},
		{args: []string{"--config-type", "xds", "--xds-tls", "--xds-tls-cert", "c.pem"}, want: "xds-tls-cert, xds-tls-key: give both or neither"},
		{env: map[string]string{"TOLLGATE_CONFIG_TYPE": "files"}, want: `config-type: unknown type "files" (want file or xds)`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := load(t, tt.env, tt.args...)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error = %v, want %s", err, tt.want)
			}
		})
	}
}

func TestXDSSettingsFromEnvironment(t *testing.T) {
	env := map[string]string{
		"TOLLGATE_CONFIG_TYPE":                        "xds",
		"TOLLGATE_XDS_SERVER":                         "envoy-gateway:18001",
		"TOLLGATE_XDS_NODE_METADATA":                  `{"cluster":"eg"}`,
		"TOLLGATE_XDS_HEADERS":                        "x-a=1, X-B=2",
		"TOLLGATE_FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
	}
	s, err := load(t, env)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := s.XDS.nodeMetadata()
	h, _ := s.XDS.headers()
	if s.XDS.ConfigType != "xds" || s.XDS.Server != "envoy-gateway:18001" || !s.XDS.ForceStart || md["cluster"] != "eg" || h["x-a"] != "1" || h["x-b"] != "2" {
		t.Fatalf("settings = %+v, metadata %v, headers %v", s.XDS, md, h)
	}
}
