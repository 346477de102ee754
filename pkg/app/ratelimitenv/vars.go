package ratelimitenv

import (
	"fmt"
	"strings"
	"time"
)

// This file is the mapping itself: one row per variable of
// envoyproxy/ratelimit, in the order of the README's table.

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
		{Name: "GRPC_MAX_CONNECTION_AGE", Setting: "grpc-max-connection-age", Trigger: true, Apply: applyDurationOr("grpc-max-connection-age", 24*time.Hour),
			Note: "`grpc-max-connection-age`, a duration such as `30m`; unset, ratelimit's `24h` (tollgate's own default: never)"},
		{Name: "GRPC_MAX_CONNECTION_AGE_GRACE", Setting: "grpc-max-connection-age-grace", Trigger: true, Apply: applyDurationOr("grpc-max-connection-age-grace", time.Hour),
			Note: "`grpc-max-connection-age-grace`, a duration; unset, ratelimit's `1h` (tollgate's own default: as long as calls take)"},
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
