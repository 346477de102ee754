// Package ratelimitenv lets tollgate start from envoyproxy/ratelimit's
// environment, so that a deployment of it (Envoy Gateway's, a Helm
// chart's) can swap the image and change nothing else. It maps the
// variables onto tollgate's settings, by their flag names, through a
// Source that knows which settings tollgate's own flags, variables and
// settings file set; and it renders the README's table of the mapping.
//
// The mapping applies only when the environment is envoyproxy/ratelimit's:
// when at least one variable marked Trigger is non-empty.
// Those are the names no other program is likely to set (RUNTIME_*,
// REDIS_*, BACKEND_TYPE, USE_STATSD, ...); generic ones such as PORT,
// HOST or LOG_LEVEL alone do not switch it on, so a platform that sets
// PORT does not move tollgate's listeners. A variable is mapped only onto
// a setting that tollgate's own flags, TOLLGATE_* variables and settings
// file leave unset; a variable so shadowed is reported in a warning.
package ratelimitenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Source is where the settings are resolved: a setting is named by its
// flag, as in "redis-addrs". *viper.Viper is one.
type Source interface {
	// AllKeys returns the name of every setting.
	AllKeys() []string
	// IsSet reports whether a setting has a value of its own (from a flag,
	// a variable or the settings file), not only its default.
	IsSet(key string) bool
	// Set gives a setting a value.
	Set(key string, value any)
}

// variable is one variable of envoyproxy/ratelimit's environment and
// what tollgate does with it.
type variable struct {
	// Name is the variable's name.
	Name string
	// Setting names the tollgate settings it maps onto; empty when it has
	// none.
	Setting string
	// Trigger marks the variables whose presence makes the environment
	// envoyproxy/ratelimit's.
	Trigger bool
	// Apply maps the variable (and those read with it) onto the settings
	// through m; nil when another row's Apply reads it.
	Apply func(m *envMapping, name, val string)
	// Note says what tollgate does with it, for the README's table.
	Note string
}

// vars returns the whole mapping, in the order of the README's
// table.
func vars() []variable {
	return []variable{
		{Name: "RUNTIME_ROOT", Setting: "config-dir", Trigger: true, Apply: applyRuntime,
			Note: "`config-dir` = `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY` (defaults `/srv/runtime_data/current`, empty, `config`), as ratelimit reads it"},
		{Name: "RUNTIME_SUBDIRECTORY", Setting: "config-dir", Trigger: true, Note: "read with `RUNTIME_ROOT`"},
		{Name: "RUNTIME_APPDIRECTORY", Setting: "config-dir", Trigger: true, Note: "read with `RUNTIME_ROOT`"},
		{Name: "RUNTIME_WATCH_ROOT", Trigger: true, Apply: applyAccepted,
			Note: "accepted: tollgate always watches the config directory itself, which also sees a swapped `..data` symlink"},
		{Name: "RUNTIME_IGNOREDOTFILES", Trigger: true, Apply: applyIgnoreDotFiles,
			Note: "accepted when true: tollgate always skips dot-files; `false` gets a warning"},
		{Name: "HOST", Setting: "http-addr", Apply: applyListener("HOST", "PORT", "http-addr", "8080"),
			Note: "`http-addr` = `HOST:PORT` (ratelimit's defaults `0.0.0.0`, `8080`); `/healthcheck` answers there"},
		{Name: "PORT", Setting: "http-addr", Note: "read with `HOST`"},
		{Name: "GRPC_HOST", Setting: "grpc-addr", Apply: applyListener("GRPC_HOST", "GRPC_PORT", "grpc-addr", "8081"),
			Note: "`grpc-addr` = `GRPC_HOST:GRPC_PORT` (defaults `0.0.0.0`, `8081`)"},
		{Name: "GRPC_PORT", Setting: "grpc-addr", Note: "read with `GRPC_HOST`"},
		{Name: "DEBUG_HOST", Setting: "debug-addr", Apply: applyListener("DEBUG_HOST", "DEBUG_PORT", "debug-addr", "6070"),
			Note: "`debug-addr` = `DEBUG_HOST:DEBUG_PORT` when either is set; unset, tollgate keeps its loopback-only `127.0.0.1:6070`"},
		{Name: "DEBUG_PORT", Setting: "debug-addr", Note: "read with `DEBUG_HOST`"},
		{Name: "GRPC_UDS", Trigger: true, Apply: applyFail("tollgate listens on TCP only: unset it and use GRPC_HOST and GRPC_PORT"),
			Note: "start-up error: tollgate listens on TCP only"},
		{Name: "PROTO", Trigger: true, Apply: applyProto, Note: "`tcp` accepted; anything else is a start-up error"},
		{Name: "LOG_LEVEL", Setting: "log-level", Apply: applyLogLevel,
			Note: "`log-level`, any case: trace and debug → debug, info, warn/warning → warn, error/fatal/panic → error; unset, tollgate logs at info (ratelimit: warn)"},
		{Name: "LOG_FORMAT", Setting: "log-format", Apply: applyLogFormat, Note: "`log-format`: `json`, else `text` as in ratelimit"},
		{Name: "BACKEND_TYPE", Setting: "store", Trigger: true, Apply: applyBackend,
			Note: "`redis` (ratelimit's default) → `store` `redis` when `REDIS_URL` is set; `memcache` is a start-up error"},
		{Name: "REDIS_SOCKET_TYPE", Trigger: true, Apply: applyRedisSocket,
			Note: "`tcp` accepted; `unix` is a start-up error; unset (ratelimit: unix) with a `REDIS_URL` that is no path: tcp, with a warning"},
		{Name: "REDIS_TYPE", Setting: "redis-type", Trigger: true, Apply: applyRedisType, Note: "`redis-type`: single, sentinel or cluster, any case"},
		{Name: "REDIS_URL", Setting: "redis-addrs, redis-master-name", Trigger: true, Apply: applyRedisURL,
			Note: "single: `redis-addrs` = the URL; sentinel: `master,host:port,...` → `redis-master-name` and the sentinels; cluster: comma-separated nodes"},
		{Name: "REDIS_AUTH", Setting: "redis-username, redis-password", Trigger: true, Apply: applyRedisAuth,
			Note: "password, or `user:password` split at the first colon; a secret, never logged; `TOLLGATE_REDIS_PASSWORD` and `redis-password-file` win"},
		{Name: "REDIS_TLS", Setting: "redis-tls", Trigger: true, Apply: applyRedisTLS,
			Note: "`redis-tls`; its files below are read only when it is true (else one warning)"},
		{Name: "REDIS_TLS_CACERT", Setting: "redis-tls-ca", Trigger: true, Note: "read with `REDIS_TLS`"},
		{Name: "REDIS_TLS_CLIENT_CERT", Setting: "redis-tls-cert", Trigger: true, Note: "read with `REDIS_TLS`"},
		{Name: "REDIS_TLS_CLIENT_KEY", Setting: "redis-tls-key", Trigger: true, Note: "read with `REDIS_TLS`"},
		{Name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", Trigger: true, Apply: applyRedisSkipHostname,
			Note: "true: one warning; tollgate always verifies the host name (set `redis-tls-server-name` to the certificate's)"},
		{Name: "REDIS_POOL_SIZE", Setting: "redis-pool-size", Trigger: true, Apply: applyInt("redis-pool-size"),
			Note: "`redis-pool-size` (connections per node)"},
		{Name: "REDIS_PIPELINE_WINDOW", Setting: "redis-batch-window", Trigger: true, Apply: applyPipelineWindow,
			Note: "`redis-batch-window`; `0` (ratelimit: no pipelining) → no batching"},
		{Name: "REDIS_PIPELINE_LIMIT", Trigger: true, Apply: applyWarnUnlessZero("tollgate bounds a batch by --redis-batch-window alone"),
			Note: "one warning unless 0: batches are bounded by time alone"},
		{Name: "REDIS_PERSECOND", Trigger: true, Apply: applyPerSecond,
			Note: "true is a start-up error: tollgate counts every unit in one Redis; the other `REDIS_PERSECOND_*` get one warning"},
		{Name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", Trigger: true, Apply: applyWarnUnlessFalse("tollgate's readiness follows its Redis circuit breaker with --breaker-not-serving"),
			Note: "one warning: see `breaker-not-serving`"},
		{Name: "CACHE_KEY_PREFIX", Setting: "redis-key-prefix", Trigger: true, Apply: applyString("redis-key-prefix"),
			Note: "`redis-key-prefix`"},
		{Name: "LOCAL_CACHE_SIZE_IN_BYTES", Setting: overLimitCacheKey, Trigger: true, Apply: applyLocalCache,
			Note: "`over-limit-cache-bytes`: counters known to be over the limit answered locally until their reset"},
		{Name: "EXPIRATION_JITTER_MAX_SECONDS", Trigger: true, Apply: applyWarnUnlessZero("tollgate's keys expire when their window or bucket does, without jitter"),
			Note: "one warning unless 0: keys expire with their window, without jitter"},
		{Name: "NEAR_LIMIT_RATIO", Trigger: true, Apply: applyWarn("tollgate has no near-limit statistic; tollgate_decisions counts decisions by result"),
			Note: "one warning: no near-limit statistic"},
		{Name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", Trigger: true, Apply: applyStopIncrement,
			Note: "accepted when true: tollgate never counts a rejected hit; `false` gets a warning"},
		{Name: "LIMIT_RESPONSE_HEADERS_ENABLED", Setting: "response-headers", Trigger: true, Apply: applyResponseHeaders,
			Note: "true → `response-headers` `draft03` (RateLimit-Limit, -Remaining, -Reset); false or unset → `none`, as ratelimit sends none"},
		{Name: "LIMIT_LIMIT_HEADER", Trigger: true, Note: "read with `LIMIT_RESPONSE_HEADERS_ENABLED`: only its default name is possible, else one warning"},
		{Name: "LIMIT_REMAINING_HEADER", Trigger: true, Note: "read with `LIMIT_RESPONSE_HEADERS_ENABLED`: only its default name is possible, else one warning"},
		{Name: "LIMIT_RESET_HEADER", Trigger: true, Note: "read with `LIMIT_RESPONSE_HEADERS_ENABLED`: only its default name is possible, else one warning"},
		{Name: "SHADOW_MODE", Setting: "shadow-mode", Trigger: true, Apply: applyBool("shadow-mode"), Note: "`shadow-mode`"},
		{Name: "RESPONSE_DYNAMIC_METADATA", Setting: "response-dynamic-metadata", Trigger: true, Apply: applyBool("response-dynamic-metadata"),
			Note: "`response-dynamic-metadata`: the same domain, descriptors, hitsAddend and metadata in the answer's dynamic metadata; tollgate's own key `tollgate` is there too unless `decision-metadata` is false"},
		{Name: "MERGE_DOMAIN_CONFIG", Trigger: true, Apply: applyWarnUnlessFalse("tollgate rejects a domain defined in two files"),
			Note: "one warning when true: a domain must be defined in one file"},
		{Name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", Trigger: true, Apply: applyWarnUnlessFalse("tollgate is ready once its first configuration has loaded"),
			Note: "one warning when true: tollgate is ready once its first configuration loaded"},
		{Name: "FORCE_START_WITHOUT_INITIAL_CONFIG", Setting: "force-start-without-initial-config", Trigger: true, Apply: applyBool("force-start-without-initial-config"),
			Note: "`force-start-without-initial-config`"},
		{Name: "CONFIG_TYPE", Setting: "config-type", Trigger: true, Apply: applyConfigType,
			Note: "`config-type`: `FILE` → file, `GRPC_XDS_SOTW` → xds (any case)"},
		{Name: "CONFIG_GRPC_XDS_SERVER_URL", Setting: "xds-server", Trigger: true, Apply: applyString("xds-server"), Note: "`xds-server`"},
		{Name: "CONFIG_GRPC_XDS_NODE_ID", Setting: "xds-node-id", Trigger: true, Apply: applyString("xds-node-id"), Note: "`xds-node-id`"},
		{Name: "CONFIG_GRPC_XDS_NODE_METADATA", Setting: "xds-node-metadata", Trigger: true, Apply: applyNodeMetadata,
			Note: "`xds-node-metadata`: `k=v,k2=v2`, each split at its first `=` as ratelimit does (a pair without `=` is dropped with a warning) → a JSON object"},
		{Name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", Setting: "xds-headers", Trigger: true, Apply: applyXDSHeaders,
			Note: "`xds-headers`: `k:v,k2:v2`, each split at its first `:` → `k=v,k2=v2`; may carry tokens, never logged"},
		{Name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", Setting: "xds-retry-interval", Trigger: true, Apply: applyDuration("xds-retry-interval"),
			Note: "`xds-retry-interval`"},
		{Name: "CONFIG_GRPC_XDS_SERVER_USE_TLS", Setting: "xds-tls", Trigger: true, Apply: applyBool("xds-tls"), Note: "`xds-tls`"},
		{Name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", Setting: "xds-tls-cert", Trigger: true, Apply: applyString("xds-tls-cert"), Note: "`xds-tls-cert`"},
		{Name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", Setting: "xds-tls-key", Trigger: true, Apply: applyString("xds-tls-key"), Note: "`xds-tls-key`"},
		{Name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", Setting: "xds-tls-ca", Trigger: true, Apply: applyString("xds-tls-ca"), Note: "`xds-tls-ca`"},
		{Name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN", Setting: "xds-tls-san", Trigger: true, Apply: applyString("xds-tls-san"), Note: "`xds-tls-san`"},
		{Name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", Trigger: true, Apply: applyWarn("tollgate's xDS backoff starts at --xds-retry-interval and doubles to a minute, jittered"),
			Note: "one warning: see `xds-retry-interval`"},
		{Name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL", Trigger: true, Apply: applyWarn("tollgate's xDS backoff is capped at a minute"), Note: "one warning"},
		{Name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", Trigger: true, Apply: applyWarn("tollgate's xDS backoff has a fixed jitter"), Note: "one warning"},
		{Name: "XDS_CLIENT_BACKOFF_JITTER", Trigger: true, Apply: applyWarn("tollgate's xDS backoff is always jittered"), Note: "one warning"},
		{Name: "GRPC_SERVER_USE_TLS", Setting: "grpc-tls-cert, grpc-tls-key", Trigger: true, Apply: applyGRPCServerTLS,
			Note: "true: `grpc-tls-cert`/`grpc-tls-key` from the two below, a start-up error without them; the TLS variables without it: one warning, ignored"},
		{Name: "GRPC_SERVER_TLS_CERT", Setting: "grpc-tls-cert", Trigger: true, Note: "read with `GRPC_SERVER_USE_TLS`"},
		{Name: "GRPC_SERVER_TLS_KEY", Setting: "grpc-tls-key", Trigger: true, Note: "read with `GRPC_SERVER_USE_TLS`"},
		{Name: "GRPC_CLIENT_TLS_CACERT", Setting: "grpc-tls-client-ca", Trigger: true, Note: "read with `GRPC_SERVER_USE_TLS`: client certificates required"},
		{Name: "GRPC_CLIENT_TLS_SAN", Setting: "grpc-tls-client-san", Trigger: true, Note: "read with `GRPC_SERVER_USE_TLS`; without a CA it is dropped with a warning, as ratelimit ignores it"},
		{Name: "GRPC_MAX_CONNECTION_AGE", Trigger: true, Apply: applyWarn("tollgate does not age out gRPC connections"), Note: "one warning"},
		{Name: "GRPC_MAX_CONNECTION_AGE_GRACE", Trigger: true, Apply: applyWarn("tollgate does not age out gRPC connections"), Note: "one warning"},
		{Name: "TRACING_ENABLED", Setting: "tracing-endpoint", Trigger: true, Apply: applyTracing,
			Note: "true: spans go over OTLP/gRPC to `OTEL_EXPORTER_OTLP_ENDPOINT` (tollgate reads the OTEL_* variables itself), else `http://localhost:4317`"},
		{Name: "TRACING_EXPORTER_PROTOCOL", Trigger: true, Note: "read with `TRACING_ENABLED`: `grpc` accepted; `http` (ratelimit's default) is a start-up error, tollgate exports OTLP/gRPC only"},
		{Name: "TRACING_SAMPLING_RATE", Setting: "tracing-sample-ratio", Trigger: true, Note: "read with `TRACING_ENABLED`: `tracing-sample-ratio`"},
		{Name: "TRACING_SERVICE_NAME", Trigger: true, Apply: applyWarn("set OTEL_SERVICE_NAME instead"), Note: "one warning: set `OTEL_SERVICE_NAME`"},
		{Name: "TRACING_SERVICE_NAMESPACE", Trigger: true, Apply: applyWarn("set OTEL_RESOURCE_ATTRIBUTES=service.namespace=... instead"), Note: "one warning: use `OTEL_RESOURCE_ATTRIBUTES`"},
		{Name: "TRACING_SERVICE_INSTANCE_ID", Trigger: true, Apply: applyWarn("set OTEL_RESOURCE_ATTRIBUTES=service.instance.id=... instead"), Note: "one warning: use `OTEL_RESOURCE_ATTRIBUTES`"},
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Note: "read by tollgate's telemetry itself, in every environment"},
		{Name: "USE_STATSD", Trigger: true, Apply: applyStatsd,
			Note: "true (ratelimit's default) or any `STATSD_*`: one warning, tollgate exports Prometheus (`/metrics`) and OTLP, no statsd"},
		{Name: "STATSD_HOST", Trigger: true, Note: "read with `USE_STATSD`"},
		{Name: "STATSD_PORT", Trigger: true, Note: "read with `USE_STATSD`"},
		{Name: "USE_DOG_STATSD", Trigger: true, Note: "read with `USE_STATSD`"},
		{Name: "USE_DOG_STATSD_MOGRIFIERS", Trigger: true, Note: "read with `USE_STATSD`"},
		{Name: "EXTRA_TAGS", Trigger: true, Note: "read with `USE_STATSD`"},
		{Name: "STATS_FLUSH_INTERVAL", Trigger: true, Note: "read with `USE_STATSD`"},
		{Name: "DISABLE_STATS", Trigger: true, Note: "read with `USE_STATSD`"},
		{Name: "USE_PROMETHEUS", Trigger: true, Apply: applyPrometheus,
			Note: "accepted: tollgate always serves `/metrics` on `http-addr`; `PROMETHEUS_ADDR`, `PROMETHEUS_PATH` and `PROMETHEUS_MAPPER_YAML` get one warning"},
		{Name: "PROMETHEUS_ADDR", Trigger: true, Note: "read with `USE_PROMETHEUS`"},
		{Name: "PROMETHEUS_PATH", Trigger: true, Note: "read with `USE_PROMETHEUS`"},
		{Name: "PROMETHEUS_MAPPER_YAML", Trigger: true, Note: "read with `USE_PROMETHEUS`"},
		{Name: "MEMCACHE_HOST_PORT", Trigger: true, Apply: applyMemcache,
			Note: "with `BACKEND_TYPE=memcache` a start-up error; otherwise the `MEMCACHE_*` variables get one warning"},
		{Name: "MEMCACHE_SRV", Trigger: true, Note: "read with `MEMCACHE_HOST_PORT`"},
	}
}

// overLimitCacheKey is the setting LOCAL_CACHE_SIZE_IN_BYTES maps onto.
const overLimitCacheKey = "over-limit-cache-bytes"

// ErrVariable marks an envoyproxy/ratelimit variable tollgate cannot
// honour.
var ErrVariable = errors.New("envoyproxy/ratelimit environment")

// Report is what the mapping did, logged once at start. It
// holds variable names and messages, never values.
type Report struct {
	// Active is whether the environment was envoyproxy/ratelimit's.
	Active bool
	// Honoured lists the variables that were mapped or accepted.
	Honoured []string
	// Warnings hold one message per variable tollgate ignores.
	Warnings []string
	// FixedWindow is whether the default algorithm became fixed_window.
	FixedWindow bool
	// ChargeAlways is whether the default charge became always: in
	// envoyproxy/ratelimit's environment, or with rules over xDS.
	ChargeAlways bool
	// XDS is whether the default charge became always because the rules
	// come over xDS.
	XDS bool
	// NoHeaders is whether response-headers became none because
	// LIMIT_RESPONSE_HEADERS_ENABLED was unset.
	NoHeaders bool
}

// Log writes the report: nothing unless the environment was
// envoyproxy/ratelimit's or the rules come over xDS.
func (r Report) Log(logger *slog.Logger) {
	if logger == nil {
		return
	}
	if !r.Active {
		if r.XDS {
			logger.Info("rules over xDS: default charge always, as envoyproxy/ratelimit counts (--default-charge admitted opts out)")
		}
		return
	}
	logger.Info("envoyproxy/ratelimit environment honoured", "variables", strings.Join(r.Honoured, ","))
	var defaults []string
	if r.FixedWindow {
		defaults = append(defaults, "default algorithm fixed_window")
	}
	if r.ChargeAlways {
		defaults = append(defaults, "default charge always")
	}
	if len(defaults) > 0 {
		logger.Info("envoyproxy/ratelimit environment: " + strings.Join(defaults, ", ") + ", as envoyproxy/ratelimit counts")
	}
	if r.NoHeaders {
		logger.Info("envoyproxy/ratelimit environment: response headers none, as envoyproxy/ratelimit sends none without LIMIT_RESPONSE_HEADERS_ENABLED")
	}
	for _, w := range r.Warnings {
		logger.Warn("envoyproxy/ratelimit environment: " + w)
	}
}

// envMapping carries one mapping run.
type envMapping struct {
	v      Source // the settings
	getenv func(string) string
	own    map[string]bool // settings tollgate's own sources set
	report *Report
	errs   []error
}

// get returns a variable, trimmed.
func (m *envMapping) get(name string) string { return strings.TrimSpace(m.getenv(name)) }

func (m *envMapping) honour(names ...string) {
	for _, n := range names {
		if m.get(n) != "" && !slices.Contains(m.report.Honoured, n) {
			m.report.Honoured = append(m.report.Honoured, n)
		}
	}
}

func (m *envMapping) warn(name, msg string) {
	m.report.Warnings = append(m.report.Warnings, name+": "+msg)
}

func (m *envMapping) fail(name, msg string) {
	m.errs = append(m.errs, fmt.Errorf("%w: %s: %s", ErrVariable, name, msg))
}

// set maps names onto the setting key unless tollgate's own settings set
// it, in which case it warns that they are ignored. It reports whether it
// set the value.
func (m *envMapping) set(key string, value any, names ...string) bool {
	var present []string
	for _, n := range names {
		if m.get(n) != "" {
			present = append(present, n)
		}
	}
	if m.own[key] {
		if len(present) > 0 {
			m.warn(strings.Join(present, ", "), "ignored: tollgate's own setting "+key+" wins")
		}
		return false
	}
	m.v.Set(key, value)
	m.honour(names...)
	return true
}

// Apply maps envoyproxy/ratelimit's environment, read through getenv, onto
// v, whose values so far come from tollgate's own sources. It returns what
// it did, and an error naming every variable it cannot honour.
func Apply(v Source, getenv func(string) string) (Report, error) {
	var report Report
	m := &envMapping{v: v, getenv: getenv, own: map[string]bool{}, report: &report}
	for _, r := range vars() {
		if r.Trigger && m.get(r.Name) != "" {
			report.Active = true
			break
		}
	}
	if !report.Active {
		return report, nil
	}
	for _, key := range v.AllKeys() {
		m.own[key] = v.IsSet(key)
	}
	m.own["redis-password"] = v.IsSet("redis-password") || v.IsSet("redis-password-file") || getenv("TOLLGATE_REDIS_PASSWORD") != ""
	for _, r := range vars() {
		if r.Apply != nil {
			r.Apply(m, r.Name, m.get(r.Name))
		}
	}
	if !m.own["default-algorithm"] {
		v.Set("default-algorithm", "fixed_window")
		report.FixedWindow = true
	}
	if !m.own["default-charge"] {
		v.Set("default-charge", "always")
		report.ChargeAlways = true
	}
	return report, errors.Join(m.errs...)
}

func applyRuntime(m *envMapping, _, root string) {
	sub, app := m.get("RUNTIME_SUBDIRECTORY"), m.get("RUNTIME_APPDIRECTORY")
	if root == "" {
		root = "/srv/runtime_data/current"
	}
	if app == "" {
		app = "config"
	}
	m.set("config-dir", filepath.Join(root, sub, app), "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY")
}

func applyAccepted(m *envMapping, _, val string) {
	if val != "" {
		m.honour("RUNTIME_WATCH_ROOT")
	}
}

func applyIgnoreDotFiles(m *envMapping, _, val string) {
	const name = "RUNTIME_IGNOREDOTFILES"
	if val == "" {
		return
	}
	b, err := strconv.ParseBool(val)
	switch {
	case err != nil:
		m.fail(name, fmt.Sprintf("want true or false, got %q", val))
	case b:
		m.honour(name)
	default:
		m.warn(name, "false is ignored: tollgate always skips dot-files")
	}
}

// applyListener returns the Apply of a HOST/PORT pair.
func applyListener(hostVar, portVar, key, defPort string) func(*envMapping, string, string) {
	return func(m *envMapping, _, host string) {
		port := m.get(portVar)
		if host == "" && port == "" {
			return
		}
		if port == "" {
			port = defPort
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			m.fail(portVar, fmt.Sprintf("want a port number, got %q", port))
			return
		}
		if host == "0.0.0.0" {
			host = "" // every interface, as tollgate's own ":port"
		}
		m.set(key, net.JoinHostPort(host, port), hostVar, portVar)
	}
}

func applyFail(msg string) func(*envMapping, string, string) {
	return func(m *envMapping, name, val string) {
		if val != "" {
			m.fail(name, msg)
		}
	}
}

func applyProto(m *envMapping, _, val string) {
	switch strings.ToLower(val) {
	case "":
	case "tcp":
		m.honour("PROTO")
	default:
		m.fail("PROTO", fmt.Sprintf("tollgate listens on tcp only, got %q", val))
	}
}

func applyLogLevel(m *envMapping, _, val string) {
	if val == "" {
		return
	}
	var level string
	switch strings.ToLower(val) {
	case "trace", "debug":
		level = "debug"
	case "info":
		level = "info"
	case "warn", "warning":
		level = "warn"
	case "error", "fatal", "panic":
		level = "error"
	default:
		m.fail("LOG_LEVEL", fmt.Sprintf("unknown level %q (want trace, debug, info, warn, error, fatal or panic)", val))
		return
	}
	m.set("log-level", level, "LOG_LEVEL")
}

func applyLogFormat(m *envMapping, _, val string) {
	if val == "" {
		return
	}
	format := "text"
	if strings.EqualFold(val, "json") {
		format = "json"
	} else if !strings.EqualFold(val, "text") {
		m.warn("LOG_FORMAT", "not json, so text, as in envoyproxy/ratelimit")
	}
	m.set("log-format", format, "LOG_FORMAT")
}

func applyBackend(m *envMapping, _, val string) {
	switch strings.ToLower(val) {
	case "", "redis":
		if m.get("REDIS_URL") == "" {
			if val != "" {
				m.warn("BACKEND_TYPE", "redis without REDIS_URL: tollgate cannot use ratelimit's default unix socket, so it counts in memory")
			}
			return
		}
		m.set("store", "redis", "BACKEND_TYPE", "REDIS_URL")
	case "memcache":
		m.fail("BACKEND_TYPE", "memcache is not supported: tollgate counts in redis (or in memory)")
	default:
		m.fail("BACKEND_TYPE", fmt.Sprintf("unknown backend %q (want redis)", val))
	}
}

func applyRedisSocket(m *envMapping, _, val string) {
	const name = "REDIS_SOCKET_TYPE"
	switch strings.ToLower(val) {
	case "tcp":
		m.honour(name)
	case "unix":
		m.fail(name, "unix sockets are not supported: tollgate connects to redis over tcp")
	case "":
		if u := m.get("REDIS_URL"); u != "" {
			if strings.HasPrefix(u, "/") {
				m.fail(name, "unset means unix, and REDIS_URL is a socket path: tollgate connects to redis over tcp")
			} else {
				m.warn(name, "unset means unix in envoyproxy/ratelimit; REDIS_URL is no path, so tcp")
			}
		}
	default:
		m.fail(name, fmt.Sprintf("unknown socket type %q (want tcp)", val))
	}
}

func applyRedisType(m *envMapping, _, val string) {
	switch t := strings.ToLower(val); t {
	case "":
	case "single", "sentinel", "cluster":
		m.set("redis-type", t, "REDIS_TYPE")
	default:
		m.fail("REDIS_TYPE", fmt.Sprintf("unknown type %q (want single, sentinel or cluster)", val))
	}
}

func applyRedisURL(m *envMapping, _, val string) {
	if val == "" {
		return
	}
	var parts []string
	for p := range strings.SplitSeq(val, ",") {
		if p = strings.TrimSpace(p); p != "" {
			parts = append(parts, p)
		}
	}
	switch strings.ToLower(m.get("REDIS_TYPE")) {
	case "sentinel":
		if len(parts) < 2 {
			m.fail("REDIS_URL", "sentinel wants master-name,host:port[,host:port...]")
			return
		}
		m.set("redis-master-name", parts[0], "REDIS_URL")
		m.set("redis-addrs", parts[1:], "REDIS_URL")
	case "cluster":
		m.set("redis-addrs", parts, "REDIS_URL")
	default:
		m.set("redis-addrs", []string{val}, "REDIS_URL")
	}
}

func applyRedisAuth(m *envMapping, _, val string) {
	if val == "" {
		return
	}
	user, pass, found := strings.Cut(val, ":")
	if !found {
		user, pass = "", val
	}
	if !m.set("redis-password", pass, "REDIS_AUTH") {
		return
	}
	if found {
		m.set("redis-username", user)
	}
}

func applyRedisTLS(m *envMapping, _, val string) {
	files := []struct{ name, key string }{
		{"REDIS_TLS_CACERT", "redis-tls-ca"}, {"REDIS_TLS_CLIENT_CERT", "redis-tls-cert"}, {"REDIS_TLS_CLIENT_KEY", "redis-tls-key"},
	}
	on := false
	if val != "" {
		b, err := strconv.ParseBool(val)
		if err != nil {
			m.fail("REDIS_TLS", fmt.Sprintf("want true or false, got %q", val))
			return
		}
		on = b
		m.set("redis-tls", b, "REDIS_TLS")
	}
	var ignored []string
	for _, f := range files {
		if p := m.get(f.name); p != "" {
			if on {
				m.set(f.key, p, f.name)
			} else {
				ignored = append(ignored, f.name)
			}
		}
	}
	if len(ignored) > 0 {
		m.warn(strings.Join(ignored, ", "), "ignored without REDIS_TLS=true, as in envoyproxy/ratelimit")
	}
}

func applyRedisSkipHostname(m *envMapping, _, val string) {
	if b, _ := strconv.ParseBool(val); b {
		m.warn("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "not supported: tollgate verifies the redis host name; set redis-tls-server-name to the name in its certificate")
	}
}

func applyPipelineWindow(m *envMapping, _, val string) {
	if val == "" {
		return
	}
	d, err := time.ParseDuration(val)
	if err != nil {
		m.fail("REDIS_PIPELINE_WINDOW", fmt.Sprintf("want a duration such as 150us, got %q", val))
		return
	}
	if d == 0 {
		d = -1 // no batching, as ratelimit's 0 means no pipelining
	}
	m.set("redis-batch-window", d, "REDIS_PIPELINE_WINDOW")
}

func applyPerSecond(m *envMapping, _, val string) {
	if b, _ := strconv.ParseBool(val); b {
		m.fail("REDIS_PERSECOND", "a second redis for per-second limits is not supported: tollgate counts every unit in one")
		return
	}
	var set []string
	for _, n := range []string{"REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE",
		"REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT"} {
		if m.get(n) != "" {
			set = append(set, n)
		}
	}
	if len(set) > 0 {
		m.warn(strings.Join(set, ", "), "ignored: tollgate counts every unit in one redis")
	}
}

func applyLocalCache(m *envMapping, _, val string) {
	const name = "LOCAL_CACHE_SIZE_IN_BYTES"
	if val == "" {
		return
	}
	n, err := strconv.Atoi(val)
	if err != nil || n < 0 {
		m.fail(name, fmt.Sprintf("want a number of bytes, got %q", val))
		return
	}
	if n == 0 {
		m.honour(name)
		return
	}
	m.set(overLimitCacheKey, n, name)
}

func applyStopIncrement(m *envMapping, _, val string) {
	const name = "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"
	if val == "" {
		return
	}
	if b, _ := strconv.ParseBool(val); b {
		m.honour(name)
		return
	}
	m.warn(name, "false is ignored: tollgate never counts a rejected hit")
}

func applyResponseHeaders(m *envMapping, _, val string) {
	on := false
	if val != "" {
		b, err := strconv.ParseBool(val)
		if err != nil {
			m.fail("LIMIT_RESPONSE_HEADERS_ENABLED", fmt.Sprintf("want true or false, got %q", val))
			return
		}
		on = b
	}
	style := "none"
	if on {
		style = "draft03"
	}
	if m.set("response-headers", style, "LIMIT_RESPONSE_HEADERS_ENABLED") && val == "" {
		m.report.NoHeaders = true
	}
	for _, h := range []struct{ name, def string }{
		{"LIMIT_LIMIT_HEADER", "RateLimit-Limit"}, {"LIMIT_REMAINING_HEADER", "RateLimit-Remaining"}, {"LIMIT_RESET_HEADER", "RateLimit-Reset"},
	} {
		got := m.get(h.name)
		switch {
		case got == "":
		case strings.EqualFold(got, h.def):
			m.honour(h.name)
		default:
			m.warn(h.name, "ignored: tollgate's header names are fixed ("+h.def+" in draft03)")
		}
	}
}

func applyConfigType(m *envMapping, _, val string) {
	switch strings.ToUpper(val) {
	case "":
	case "FILE":
		m.set("config-type", "file", "CONFIG_TYPE")
	case "GRPC_XDS_SOTW":
		m.set("config-type", "xds", "CONFIG_TYPE")
	default:
		m.fail("CONFIG_TYPE", fmt.Sprintf("unknown type %q (want FILE or GRPC_XDS_SOTW)", val))
	}
}

// splitPairs splits a list of pairs separated by commas, each at the first
// sep. It reports the number of non-empty pairs without sep, left out.
func splitPairs(val, sep string) (pairs [][2]string, bad int) {
	for p := range strings.SplitSeq(val, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		k, v, ok := strings.Cut(p, sep)
		if !ok || strings.TrimSpace(k) == "" {
			bad++
			continue
		}
		pairs = append(pairs, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
	}
	return pairs, bad
}

func applyNodeMetadata(m *envMapping, _, val string) {
	const name = "CONFIG_GRPC_XDS_NODE_METADATA"
	if val == "" {
		return
	}
	// ratelimit splits each pair at its first '=' and drops a pair
	// without one.
	pairs, bad := splitPairs(val, "=")
	if bad > 0 {
		m.warn(name, fmt.Sprintf("%d pairs without '=' ignored, as in envoyproxy/ratelimit", bad))
	}
	md := map[string]string{}
	for _, p := range pairs {
		md[p[0]] = p[1]
	}
	js, err := json.Marshal(md)
	if err != nil {
		m.fail(name, err.Error())
		return
	}
	m.set("xds-node-metadata", string(js), name)
}

func applyXDSHeaders(m *envMapping, _, val string) {
	const name = "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"
	if val == "" {
		return
	}
	// ratelimit reads a map: each pair split at its first ':'.
	pairs, bad := splitPairs(val, ":")
	if bad > 0 { // no value in the message: it may hold a token
		m.fail(name, fmt.Sprintf("%d pairs are not name:value", bad))
		return
	}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		out[i] = p[0] + "=" + p[1]
	}
	m.set("xds-headers", strings.Join(out, ","), name)
}

func applyGRPCServerTLS(m *envMapping, _, val string) {
	const name = "GRPC_SERVER_USE_TLS"
	vars := []struct{ name, key string }{
		{"GRPC_SERVER_TLS_CERT", "grpc-tls-cert"}, {"GRPC_SERVER_TLS_KEY", "grpc-tls-key"},
		{"GRPC_CLIENT_TLS_CACERT", "grpc-tls-client-ca"}, {"GRPC_CLIENT_TLS_SAN", "grpc-tls-client-san"},
	}
	on := false
	if val != "" {
		b, err := strconv.ParseBool(val)
		if err != nil {
			m.fail(name, fmt.Sprintf("want true or false, got %q", val))
			return
		}
		on = b
	}
	if !on {
		var ignored []string
		for _, v := range vars {
			if m.get(v.name) != "" {
				ignored = append(ignored, v.name)
			}
		}
		if len(ignored) > 0 {
			m.warn(strings.Join(ignored, ", "), "ignored without GRPC_SERVER_USE_TLS=true, as in envoyproxy/ratelimit")
		}
		return
	}
	if m.get("GRPC_SERVER_TLS_CERT") == "" || m.get("GRPC_SERVER_TLS_KEY") == "" {
		m.fail(name, "true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
		return
	}
	m.honour(name)
	for _, v := range vars {
		p := m.get(v.name)
		if p == "" {
			continue
		}
		if v.name == "GRPC_CLIENT_TLS_SAN" && m.get("GRPC_CLIENT_TLS_CACERT") == "" {
			m.warn(v.name, "ignored without GRPC_CLIENT_TLS_CACERT, as in envoyproxy/ratelimit")
			continue
		}
		m.set(v.key, p, v.name)
	}
}

func applyTracing(m *envMapping, _, val string) {
	const name = "TRACING_ENABLED"
	on, _ := strconv.ParseBool(val)
	if !on {
		var ignored []string
		for _, n := range []string{"TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE"} {
			if m.get(n) != "" {
				ignored = append(ignored, n)
			}
		}
		if len(ignored) > 0 {
			m.warn(strings.Join(ignored, ", "), "ignored without TRACING_ENABLED=true")
		}
		return
	}
	if p := m.get("TRACING_EXPORTER_PROTOCOL"); !strings.EqualFold(p, "grpc") {
		if p == "" {
			p = "http"
		}
		m.fail("TRACING_EXPORTER_PROTOCOL", fmt.Sprintf("%s is not supported: tollgate exports OTLP over gRPC only; set it to grpc", p))
		return
	}
	m.honour(name, "TRACING_EXPORTER_PROTOCOL")
	if m.get("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && m.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		m.set("tracing-endpoint", "http://localhost:4317")
	} else {
		m.honour("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if r := m.get("TRACING_SAMPLING_RATE"); r != "" {
		f, err := strconv.ParseFloat(r, 64)
		if err != nil {
			m.fail("TRACING_SAMPLING_RATE", fmt.Sprintf("want a number between 0 and 1, got %q", r))
			return
		}
		m.set("tracing-sample-ratio", f, "TRACING_SAMPLING_RATE")
	}
}

func applyStatsd(m *envMapping, _, val string) {
	var set []string
	if b, _ := strconv.ParseBool(val); b {
		set = append(set, "USE_STATSD")
	} else if val != "" {
		m.honour("USE_STATSD")
	}
	for _, n := range []string{"STATSD_HOST", "STATSD_PORT", "USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "EXTRA_TAGS", "STATS_FLUSH_INTERVAL", "DISABLE_STATS"} {
		if m.get(n) != "" {
			set = append(set, n)
		}
	}
	if len(set) > 0 {
		m.warn(strings.Join(set, ", "), "ignored: tollgate exports Prometheus metrics (/metrics on the HTTP address) and OTLP, not statsd")
	}
}

func applyPrometheus(m *envMapping, _, val string) {
	if val != "" {
		m.honour("USE_PROMETHEUS")
	}
	var set []string
	for _, n := range []string{"PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML"} {
		if m.get(n) != "" {
			set = append(set, n)
		}
	}
	if len(set) > 0 {
		m.warn(strings.Join(set, ", "), "ignored: tollgate serves /metrics on its HTTP address")
	}
}

func applyMemcache(m *envMapping, _, _ string) {
	if strings.EqualFold(m.get("BACKEND_TYPE"), "memcache") {
		return // BACKEND_TYPE's row fails
	}
	var set []string
	for _, n := range []string{"MEMCACHE_HOST_PORT", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_TLS",
		"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"} {
		if m.get(n) != "" {
			set = append(set, n)
		}
	}
	if len(set) > 0 {
		m.warn(strings.Join(set, ", "), "ignored: tollgate has no memcache backend")
	}
}

// applyWarn returns an Apply that warns msg when the variable is set.
func applyWarn(msg string) func(*envMapping, string, string) {
	return func(m *envMapping, name, val string) {
		if val != "" {
			m.warn(name, "ignored: "+msg)
		}
	}
}

// applyWarnUnlessZero returns an Apply that warns msg when the variable is
// set to a value other than 0.
func applyWarnUnlessZero(msg string) func(*envMapping, string, string) {
	return func(m *envMapping, name, val string) {
		if val == "" {
			return
		}
		if f, err := strconv.ParseFloat(val, 64); err == nil && f == 0 {
			m.honour(name)
			return
		}
		m.warn(name, "ignored: "+msg)
	}
}

// applyWarnUnlessFalse returns an Apply that warns msg when the variable
// is set to anything but false.
func applyWarnUnlessFalse(msg string) func(*envMapping, string, string) {
	return func(m *envMapping, name, val string) {
		if val == "" {
			return
		}
		if b, err := strconv.ParseBool(val); err == nil && !b {
			m.honour(name)
			return
		}
		m.warn(name, "ignored: "+msg)
	}
}

// applyString returns an Apply that maps the variable onto key as is.
func applyString(key string) func(*envMapping, string, string) {
	return func(m *envMapping, name, val string) {
		if val != "" {
			m.set(key, val, name)
		}
	}
}

// applyBool returns an Apply that maps a true or false variable onto key.
func applyBool(key string) func(*envMapping, string, string) {
	return func(m *envMapping, name, val string) {
		if val == "" {
			return
		}
		b, err := strconv.ParseBool(val)
		if err != nil {
			m.fail(name, fmt.Sprintf("want true or false, got %q", val))
			return
		}
		m.set(key, b, name)
	}
}

// applyInt returns an Apply that maps an integer variable onto key.
func applyInt(key string) func(*envMapping, string, string) {
	return func(m *envMapping, name, val string) {
		if val == "" {
			return
		}
		n, err := strconv.Atoi(val)
		if err != nil {
			m.fail(name, fmt.Sprintf("want an integer, got %q", val))
			return
		}
		m.set(key, n, name)
	}
}

// applyDuration returns an Apply that maps a duration variable onto key.
func applyDuration(key string) func(*envMapping, string, string) {
	return func(m *envMapping, name, val string) {
		if val == "" {
			return
		}
		d, err := time.ParseDuration(val)
		if err != nil {
			m.fail(name, fmt.Sprintf("want a duration such as 3s, got %q", val))
			return
		}
		m.set(key, d, name)
	}
}

// Table renders the mapping as the README's Markdown table.
func Table() string {
	var b strings.Builder
	b.WriteString("| variable | tollgate setting | what tollgate does |\n|---|---|---|\n")
	for _, r := range vars() {
		setting := "—"
		if r.Setting != "" {
			keys := strings.Split(r.Setting, ", ")
			for i, k := range keys {
				keys[i] = "`" + k + "`"
			}
			setting = strings.Join(keys, ", ")
		}
		name := "`" + r.Name + "`"
		if r.Trigger {
			name += " *"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, setting, r.Note)
	}
	return b.String()
}
