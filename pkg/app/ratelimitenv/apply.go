package ratelimitenv

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// This file holds the Apply function of each row of vars, in the order of
// the rows: some 50 short functions, one or two per variable, read best
// side by side, so the file stays one past 600 lines.

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

// applyDurationOr is applyDuration, but maps an unset variable onto key
// as def: envoyproxy/ratelimit's default where tollgate's differs.
func applyDurationOr(key string, def time.Duration) func(*envMapping, string, string) {
	apply := applyDuration(key)
	return func(m *envMapping, name, val string) {
		if val == "" {
			m.set(key, def)
			return
		}
		apply(m, name, val)
	}
}
