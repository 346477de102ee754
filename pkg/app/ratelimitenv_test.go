package app

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/app/ratelimitenv"
	"github.com/tollgatehq/tollgate/pkg/tlsfiles/tlsfilestest"
)

// TestRatelimitEnv maps envoyproxy/ratelimit's variables onto settings: one
// case per rule, with the resulting settings, the honoured variables and
// the exact warnings or error.
func TestRatelimitEnv(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(file, []byte("config-dir: /etc/mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsDir := t.TempDir()
	ca := tlsfilestest.NewCA(t, "redis CA")
	caFile := filepath.Join(tlsDir, "ca.pem")
	tlsfilestest.WriteFile(t, caFile, ca.PEM)
	certFile, keyFile := ca.Client(t, tlsfilestest.Names{DNS: []string{"tollgate"}}).Write(t, tlsDir)
	const redisURL = "redis.ratelimit.svc:6379"
	// asRatelimit is what every mapped environment changes: fixed windows,
	// costs charged always and no response headers, as envoyproxy/ratelimit
	// counts and answers, and gRPC connections aged as it ages them.
	asRatelimit := func(edit func(*Settings)) func(*Settings) {
		return func(s *Settings) {
			s.Rules.DefaultAlgorithm, s.Rules.DefaultCharge, s.Answers.Headers = "fixed_window", "always", "none"
			s.Conns.GRPCMaxAge, s.Conns.GRPCMaxAgeGrace = 24*time.Hour, time.Hour
			s.ConfigDir = "/srv/runtime_data/current/config" // ratelimit's default runtime directory
			if edit != nil {
				edit(s)
			}
		}
	}
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		want     func(*Settings) // edits the defaults into the expected settings; nil: none expected
		honoured string
		warnings []string
		err      string
	}{
		{
			name: "generic names alone are not ratelimit's environment",
			env:  map[string]string{"PORT": "3000", "HOST": "127.0.0.1", "LOG_LEVEL": "debug", "GRPC_PORT": "3001"},
			want: func(*Settings) {},
		},
		{
			name: "Envoy Gateway's environment",
			env: map[string]string{
				"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
				"RUNTIME_IGNOREDOTFILES": "true", "USE_STATSD": "false", "LOG_LEVEL": "info",
				"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisURL,
			},
			want: asRatelimit(func(s *Settings) {
				s.ConfigDir, s.Store, s.Redis.Addrs, s.Log.Level = "/data/ratelimit/config", "redis", []string{redisURL}, "info"
			}),
			honoured: "RUNTIME_ROOT,RUNTIME_SUBDIRECTORY,RUNTIME_WATCH_ROOT,RUNTIME_IGNOREDOTFILES,LOG_LEVEL,REDIS_URL,REDIS_SOCKET_TYPE,USE_STATSD",
		},
		{
			name:     "runtime defaults and app directory",
			env:      map[string]string{"RUNTIME_APPDIRECTORY": "rules"},
			want:     asRatelimit(func(s *Settings) { s.ConfigDir = "/srv/runtime_data/current/rules" }),
			honoured: "RUNTIME_APPDIRECTORY",
		},
		{
			name: "listeners",
			env: map[string]string{"REDIS_URL": redisURL, "REDIS_SOCKET_TYPE": "TCP", "HOST": "127.0.0.1", "PORT": "9000",
				"GRPC_PORT": "9001", "DEBUG_HOST": "0.0.0.0", "DEBUG_PORT": "9002"},
			want: asRatelimit(func(s *Settings) {
				s.Store, s.Redis.Addrs = "redis", []string{redisURL}
				s.Listen.HTTP, s.Listen.GRPC, s.Listen.Debug = "127.0.0.1:9000", ":9001", ":9002"
			}),
			honoured: "HOST,PORT,GRPC_PORT,DEBUG_HOST,DEBUG_PORT,REDIS_URL,REDIS_SOCKET_TYPE",
		},
		{
			name: "a bad port",
			env:  map[string]string{"RUNTIME_ROOT": "/data", "PORT": "http"},
			err:  `envoyproxy/ratelimit environment: PORT: want a port number, got "http"`,
		},
		{
			name:     "log level in any case, json",
			env:      map[string]string{"RUNTIME_ROOT": "/d", "LOG_LEVEL": "WARNING", "LOG_FORMAT": "JSON"},
			want:     asRatelimit(func(s *Settings) { s.ConfigDir, s.Log.Level, s.Log.Format = "/d/config", "warn", "json" }),
			honoured: "RUNTIME_ROOT,LOG_LEVEL,LOG_FORMAT",
		},
		{
			name:     "trace logs at debug, another format as text",
			env:      map[string]string{"RUNTIME_ROOT": "/d", "LOG_LEVEL": "trace", "LOG_FORMAT": "logfmt"},
			want:     asRatelimit(func(s *Settings) { s.ConfigDir, s.Log.Level = "/d/config", "debug" }),
			honoured: "RUNTIME_ROOT,LOG_LEVEL,LOG_FORMAT",
			warnings: []string{"LOG_FORMAT: not json, so text, as in envoyproxy/ratelimit"},
		},
		{
			name: "unknown log level",
			env:  map[string]string{"RUNTIME_ROOT": "/d", "LOG_LEVEL": "verbose"},
			err:  `envoyproxy/ratelimit environment: LOG_LEVEL: unknown level "verbose" (want trace, debug, info, warn, error, fatal or panic)`,
		},
		{
			name: "memcache",
			env:  map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "mc:11211"},
			err:  "envoyproxy/ratelimit environment: BACKEND_TYPE: memcache is not supported: tollgate counts in redis (or in memory)",
		},
		{
			name:     "memcache variables without the memcache backend",
			env:      map[string]string{"RUNTIME_ROOT": "/d", "MEMCACHE_HOST_PORT": "mc:11211"},
			want:     asRatelimit(func(s *Settings) { s.ConfigDir = "/d/config" }),
			honoured: "RUNTIME_ROOT",
			warnings: []string{"MEMCACHE_HOST_PORT: ignored: tollgate has no memcache backend"},
		},
		{
			name:     "redis backend without a URL",
			env:      map[string]string{"RUNTIME_ROOT": "/d", "BACKEND_TYPE": "redis"},
			want:     asRatelimit(func(s *Settings) { s.ConfigDir = "/d/config" }),
			honoured: "RUNTIME_ROOT",
			warnings: []string{"BACKEND_TYPE: redis without REDIS_URL: tollgate cannot use ratelimit's default unix socket, so it counts in memory"},
		},
		{
			name: "unix socket",
			env:  map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/var/run/redis.sock"},
			err:  "envoyproxy/ratelimit environment: REDIS_SOCKET_TYPE: unix sockets are not supported: tollgate connects to redis over tcp",
		},
		{
			name: "socket type unset with a path",
			env:  map[string]string{"REDIS_URL": "/var/run/redis.sock"},
			err:  "envoyproxy/ratelimit environment: REDIS_SOCKET_TYPE: unset means unix, and REDIS_URL is a socket path: tollgate connects to redis over tcp",
		},
		{
			name:     "socket type unset with an address",
			env:      map[string]string{"REDIS_URL": redisURL},
			want:     asRatelimit(func(s *Settings) { s.Store, s.Redis.Addrs = "redis", []string{redisURL} }),
			honoured: "REDIS_URL",
			warnings: []string{"REDIS_SOCKET_TYPE: unset means unix in envoyproxy/ratelimit; REDIS_URL is no path, so tcp"},
		},
		{
			name: "sentinel",
			env:  map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379"},
			want: asRatelimit(func(s *Settings) {
				s.Store, s.Redis.Type, s.Redis.MasterName, s.Redis.Addrs = "redis", "sentinel", "mymaster", []string{"s1:26379", "s2:26379"}
			}),
			honoured: "REDIS_URL,REDIS_SOCKET_TYPE,REDIS_TYPE",
		},
		{
			name: "sentinel without sentinels",
			env:  map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster"},
			err:  "envoyproxy/ratelimit environment: REDIS_URL: sentinel wants master-name,host:port[,host:port...]",
		},
		{
			name: "cluster",
			env:  map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "Cluster", "REDIS_URL": "n1:6379, n2:6379"},
			want: asRatelimit(func(s *Settings) {
				s.Store, s.Redis.Type, s.Redis.Addrs = "redis", "cluster", []string{"n1:6379", "n2:6379"}
			}),
			honoured: "REDIS_URL,REDIS_SOCKET_TYPE,REDIS_TYPE",
		},
		{
			name: "unknown redis type",
			env:  map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "ring", "REDIS_URL": redisURL},
			err:  `envoyproxy/ratelimit environment: REDIS_TYPE: unknown type "ring" (want single, sentinel or cluster)`,
		},
		{
			name: "user and password",
			env:  map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisURL, "REDIS_AUTH": "alice:pa:ss"},
			want: asRatelimit(func(s *Settings) {
				s.Store, s.Redis.Addrs, s.Redis.Username, s.Redis.Password = "redis", []string{redisURL}, "alice", "pa:ss"
			}),
			honoured: "REDIS_URL,REDIS_SOCKET_TYPE,REDIS_AUTH",
		},
		{
			name: "password alone",
			env:  map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisURL, "REDIS_AUTH": "s3cret"},
			want: asRatelimit(func(s *Settings) {
				s.Store, s.Redis.Addrs, s.Redis.Password = "redis", []string{redisURL}, "s3cret"
			}),
			honoured: "REDIS_URL,REDIS_SOCKET_TYPE,REDIS_AUTH",
		},
		{
			name: "tollgate's password wins",
			env:  map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisURL, "REDIS_AUTH": "s3cret", "TOLLGATE_REDIS_PASSWORD": "mine"},
			want: asRatelimit(func(s *Settings) {
				s.Store, s.Redis.Addrs, s.Redis.Password = "redis", []string{redisURL}, "mine"
			}),
			honoured: "REDIS_URL,REDIS_SOCKET_TYPE",
			warnings: []string{"REDIS_AUTH: ignored: tollgate's own setting redis-password wins"},
		},
		{
			name: "redis TLS",
			env: map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisURL, "REDIS_TLS": "true",
				"REDIS_TLS_CACERT": caFile, "REDIS_TLS_CLIENT_CERT": certFile, "REDIS_TLS_CLIENT_KEY": keyFile,
				"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"},
			want: asRatelimit(func(s *Settings) {
				s.Store, s.Redis.Addrs, s.Redis.TLS = "redis", []string{redisURL}, true
				s.Redis.TLSCA, s.Redis.TLSCert, s.Redis.TLSKey = caFile, certFile, keyFile
			}),
			honoured: "REDIS_URL,REDIS_SOCKET_TYPE,REDIS_TLS,REDIS_TLS_CACERT,REDIS_TLS_CLIENT_CERT,REDIS_TLS_CLIENT_KEY",
			warnings: []string{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: not supported: tollgate verifies the redis host name; set redis-tls-server-name to the name in its certificate"},
		},
		{
			name:     "redis TLS files without REDIS_TLS",
			env:      map[string]string{"RUNTIME_ROOT": "/d", "REDIS_TLS_CACERT": "/ca.pem"},
			want:     asRatelimit(func(s *Settings) { s.ConfigDir = "/d/config" }),
			honoured: "RUNTIME_ROOT",
			warnings: []string{"REDIS_TLS_CACERT: ignored without REDIS_TLS=true, as in envoyproxy/ratelimit"},
		},
		{
			name: "pool, pipeline window 0, key prefix, shadow mode",
			env: map[string]string{"RUNTIME_ROOT": "/d", "REDIS_POOL_SIZE": "20", "REDIS_PIPELINE_WINDOW": "0",
				"CACHE_KEY_PREFIX": "rl_", "SHADOW_MODE": "true", "REDIS_PIPELINE_LIMIT": "8"},
			want: asRatelimit(func(s *Settings) {
				s.ConfigDir, s.Redis.PoolSize, s.Redis.BatchWindow, s.Redis.KeyPrefix, s.Rules.ShadowMode = "/d/config", 20, -1, "rl_", true
			}),
			honoured: "RUNTIME_ROOT,REDIS_POOL_SIZE,REDIS_PIPELINE_WINDOW,CACHE_KEY_PREFIX,SHADOW_MODE",
			warnings: []string{"REDIS_PIPELINE_LIMIT: ignored: tollgate bounds a batch by --redis-batch-window alone"},
		},
		{
			name:     "response dynamic metadata",
			env:      map[string]string{"RUNTIME_ROOT": "/d", "RESPONSE_DYNAMIC_METADATA": "true"},
			want:     asRatelimit(func(s *Settings) { s.ConfigDir, s.Answers.DynamicMetadata = "/d/config", true }),
			honoured: "RUNTIME_ROOT,RESPONSE_DYNAMIC_METADATA",
		},
		{
			name: "response dynamic metadata not a boolean",
			env:  map[string]string{"RUNTIME_ROOT": "/d", "RESPONSE_DYNAMIC_METADATA": "yes please"},
			err:  `envoyproxy/ratelimit environment: RESPONSE_DYNAMIC_METADATA: want true or false, got "yes please"`,
		},
		{
			name:     "pipeline window",
			env:      map[string]string{"RUNTIME_ROOT": "/d", "REDIS_PIPELINE_WINDOW": "150us"},
			want:     asRatelimit(func(s *Settings) { s.ConfigDir, s.Redis.BatchWindow = "/d/config", 150*time.Microsecond }),
			honoured: "RUNTIME_ROOT,REDIS_PIPELINE_WINDOW",
		},
		{
			name: "a second redis per second",
			env:  map[string]string{"RUNTIME_ROOT": "/d", "REDIS_PERSECOND": "true"},
			err:  "envoyproxy/ratelimit environment: REDIS_PERSECOND: a second redis for per-second limits is not supported: tollgate counts every unit in one",
		},
		{
			name: "ignored cache settings",
			env: map[string]string{"RUNTIME_ROOT": "/d", "EXPIRATION_JITTER_MAX_SECONDS": "300", "NEAR_LIMIT_RATIO": "0.9",
				"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"},
			want:     asRatelimit(func(s *Settings) { s.ConfigDir = "/d/config" }),
			honoured: "RUNTIME_ROOT,STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
			warnings: []string{
				"EXPIRATION_JITTER_MAX_SECONDS: ignored: tollgate's keys expire when their window or bucket does, without jitter",
				"NEAR_LIMIT_RATIO: ignored: tollgate has no near-limit statistic; tollgate_decisions counts decisions by result",
			},
		},
		{
			name:     "response headers",
			env:      map[string]string{"RUNTIME_ROOT": "/d", "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "ratelimit-limit", "LIMIT_RESET_HEADER": "X-Reset"},
			want:     asRatelimit(func(s *Settings) { s.ConfigDir, s.Answers.Headers = "/d/config", "draft03" }),
			honoured: "RUNTIME_ROOT,LIMIT_RESPONSE_HEADERS_ENABLED,LIMIT_LIMIT_HEADER",
			warnings: []string{"LIMIT_RESET_HEADER: ignored: tollgate's header names are fixed (RateLimit-Reset in draft03)"},
		},
		{
			name: "rules over xDS",
			env: map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "eg:18001", "CONFIG_GRPC_XDS_NODE_ID": "rl",
				"CONFIG_GRPC_XDS_NODE_METADATA": "cluster=eg,zone=a=b,nokv", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "authorization:Bearer t,x-a:b:c",
				"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "5s", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
				"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/c.pem", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/k.pem",
				"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/ca.pem", "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "eg.svc",
				"FORCE_START_WITHOUT_INITIAL_CONFIG": "true"},
			want: asRatelimit(func(s *Settings) {
				s.XDS.ConfigType, s.XDS.Server, s.XDS.NodeID = "xds", "eg:18001", "rl"
				s.XDS.NodeMetadata, s.XDS.Headers = `{"cluster":"eg","zone":"a=b"}`, "authorization=Bearer t,x-a=b:c"
				s.XDS.RetryInterval, s.XDS.TLS, s.XDS.TLSCert, s.XDS.TLSKey, s.XDS.TLSCA, s.XDS.TLSSAN = 5*time.Second, true, "/c.pem", "/k.pem", "/ca.pem", "eg.svc"
				s.XDS.ForceStart = true
			}),
			honoured: "FORCE_START_WITHOUT_INITIAL_CONFIG,CONFIG_TYPE,CONFIG_GRPC_XDS_SERVER_URL,CONFIG_GRPC_XDS_NODE_ID,CONFIG_GRPC_XDS_NODE_METADATA," +
				"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS,CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL,CONFIG_GRPC_XDS_SERVER_USE_TLS," +
				"CONFIG_GRPC_XDS_CLIENT_TLS_CERT,CONFIG_GRPC_XDS_CLIENT_TLS_KEY,CONFIG_GRPC_XDS_SERVER_TLS_CACERT,CONFIG_GRPC_XDS_SERVER_TLS_SAN",
			warnings: []string{"CONFIG_GRPC_XDS_NODE_METADATA: 1 pairs without '=' ignored, as in envoyproxy/ratelimit"},
		},
		{
			name: "xDS headers not name:value",
			env:  map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "authorization=Bearer t0k3n"},
			err:  "envoyproxy/ratelimit environment: CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: 1 pairs are not name:value",
		},
		{
			name: "unknown config type",
			env:  map[string]string{"CONFIG_TYPE": "GRPC_XDS_DELTA"},
			err:  `envoyproxy/ratelimit environment: CONFIG_TYPE: unknown type "GRPC_XDS_DELTA" (want FILE or GRPC_XDS_SOTW)`,
		},
		{
			name: "gRPC server TLS",
			env: map[string]string{"RUNTIME_ROOT": "/d", "GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/s.pem",
				"GRPC_SERVER_TLS_KEY": "/s.key", "GRPC_CLIENT_TLS_CACERT": "/ca.pem", "GRPC_CLIENT_TLS_SAN": "envoy"},
			want: asRatelimit(func(s *Settings) {
				s.ConfigDir, s.GRPCTLS.Cert, s.GRPCTLS.Key, s.GRPCTLS.ClientCA, s.GRPCTLS.ClientSAN = "/d/config", "/s.pem", "/s.key", "/ca.pem", "envoy"
			}),
			honoured: "RUNTIME_ROOT,GRPC_SERVER_USE_TLS,GRPC_SERVER_TLS_CERT,GRPC_SERVER_TLS_KEY,GRPC_CLIENT_TLS_CACERT,GRPC_CLIENT_TLS_SAN",
		},
		{
			name: "gRPC client SAN without a CA",
			env: map[string]string{"RUNTIME_ROOT": "/d", "GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/s.pem",
				"GRPC_SERVER_TLS_KEY": "/s.key", "GRPC_CLIENT_TLS_SAN": "envoy"},
			want: asRatelimit(func(s *Settings) {
				s.ConfigDir, s.GRPCTLS.Cert, s.GRPCTLS.Key = "/d/config", "/s.pem", "/s.key"
			}),
			honoured: "RUNTIME_ROOT,GRPC_SERVER_USE_TLS,GRPC_SERVER_TLS_CERT,GRPC_SERVER_TLS_KEY",
			warnings: []string{"GRPC_CLIENT_TLS_SAN: ignored without GRPC_CLIENT_TLS_CACERT, as in envoyproxy/ratelimit"},
		},
		{
			name: "gRPC server TLS without files",
			env:  map[string]string{"GRPC_SERVER_USE_TLS": "true"},
			err:  "envoyproxy/ratelimit environment: GRPC_SERVER_USE_TLS: true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY",
		},
		{
			name:     "gRPC TLS files without GRPC_SERVER_USE_TLS",
			env:      map[string]string{"GRPC_SERVER_TLS_CERT": "/s.pem", "GRPC_SERVER_TLS_KEY": "/s.key"},
			want:     asRatelimit(nil),
			warnings: []string{"GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY: ignored without GRPC_SERVER_USE_TLS=true, as in envoyproxy/ratelimit"},
		},
		{
			name: "gRPC connection age",
			env:  map[string]string{"RUNTIME_ROOT": "/d", "GRPC_MAX_CONNECTION_AGE": "30m", "GRPC_MAX_CONNECTION_AGE_GRACE": "90s"},
			want: asRatelimit(func(s *Settings) {
				s.ConfigDir, s.Conns.GRPCMaxAge, s.Conns.GRPCMaxAgeGrace = "/d/config", 30*time.Minute, 90*time.Second
			}),
			honoured: "RUNTIME_ROOT,GRPC_MAX_CONNECTION_AGE,GRPC_MAX_CONNECTION_AGE_GRACE",
		},
		{
			name:     "gRPC connection age alone, grace as ratelimit's default",
			env:      map[string]string{"RUNTIME_ROOT": "/d", "GRPC_MAX_CONNECTION_AGE": "1h30m"},
			want:     asRatelimit(func(s *Settings) { s.ConfigDir, s.Conns.GRPCMaxAge = "/d/config", 90*time.Minute }),
			honoured: "RUNTIME_ROOT,GRPC_MAX_CONNECTION_AGE",
		},
		{
			name:     "tollgate's own connection age wins",
			args:     []string{"--grpc-max-connection-age", "0s"},
			env:      map[string]string{"RUNTIME_ROOT": "/d", "GRPC_MAX_CONNECTION_AGE": "30m"},
			want:     asRatelimit(func(s *Settings) { s.ConfigDir, s.Conns.GRPCMaxAge = "/d/config", 0 }),
			honoured: "RUNTIME_ROOT",
			warnings: []string{"GRPC_MAX_CONNECTION_AGE: ignored: tollgate's own setting grpc-max-connection-age wins"},
		},
		{
			name: "gRPC connection age in seconds, not a duration",
			env:  map[string]string{"RUNTIME_ROOT": "/d", "GRPC_MAX_CONNECTION_AGE": "300"},
			err:  `envoyproxy/ratelimit environment: GRPC_MAX_CONNECTION_AGE: want a duration such as 3s, got "300"`,
		},
		{
			name: "gRPC connection age grace not a duration",
			env:  map[string]string{"RUNTIME_ROOT": "/d", "GRPC_MAX_CONNECTION_AGE_GRACE": "an hour"},
			err:  `envoyproxy/ratelimit environment: GRPC_MAX_CONNECTION_AGE_GRACE: want a duration such as 3s, got "an hour"`,
		},
		{
			name: "tracing over http",
			env:  map[string]string{"TRACING_ENABLED": "true"},
			err:  "envoyproxy/ratelimit environment: TRACING_EXPORTER_PROTOCOL: http is not supported: tollgate exports OTLP over gRPC only; set it to grpc",
		},
		{
			name: "tracing over gRPC",
			env:  map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SAMPLING_RATE": "0.25", "TRACING_SERVICE_NAME": "rl"},
			want: asRatelimit(func(s *Settings) {
				s.Tracing.Endpoint, s.Tracing.SampleRatio = "http://localhost:4317", 0.25
			}),
			honoured: "TRACING_ENABLED,TRACING_EXPORTER_PROTOCOL,TRACING_SAMPLING_RATE",
			warnings: []string{"TRACING_SERVICE_NAME: ignored: set OTEL_SERVICE_NAME instead"},
		},
		{
			name:     "statsd and prometheus",
			env:      map[string]string{"USE_STATSD": "true", "STATSD_HOST": "statsd", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":9090"},
			want:     asRatelimit(nil),
			honoured: "USE_PROMETHEUS",
			warnings: []string{
				"USE_STATSD, STATSD_HOST: ignored: tollgate exports Prometheus metrics (/metrics on the HTTP address) and OTLP, not statsd",
				"PROMETHEUS_ADDR: ignored: tollgate serves /metrics on its HTTP address",
			},
		},
		{
			name: "tollgate's own flags, environment and file win",
			args: []string{"--http-addr", "127.0.0.1:1", "--default-algorithm", "sliding_window_counter", "--default-charge", "admitted", "--settings", file},
			env:  map[string]string{"RUNTIME_ROOT": "/d", "PORT": "9000", "TOLLGATE_RESPONSE_HEADERS": "ietf", "LIMIT_RESPONSE_HEADERS_ENABLED": "true"},
			want: func(s *Settings) {
				s.Listen.HTTP, s.Rules.DefaultAlgorithm, s.ConfigDir, s.Answers.Headers = "127.0.0.1:1", "sliding_window_counter", "/etc/mine", "ietf"
				s.Conns.GRPCMaxAge, s.Conns.GRPCMaxAgeGrace = 24*time.Hour, time.Hour
			},
			warnings: []string{
				"RUNTIME_ROOT: ignored: tollgate's own setting config-dir wins",
				"PORT: ignored: tollgate's own setting http-addr wins",
				"LIMIT_RESPONSE_HEADERS_ENABLED: ignored: tollgate's own setting response-headers wins",
			},
		},
	}
	tests = append(tests, struct {
		name     string
		args     []string
		env      map[string]string
		want     func(*Settings)
		honoured string
		warnings []string
		err      string
	}{
		name:     "local cache",
		env:      map[string]string{"RUNTIME_ROOT": "/d", "LOCAL_CACHE_SIZE_IN_BYTES": "1048576"},
		want:     asRatelimit(func(s *Settings) { s.ConfigDir, s.Redis.OverLimitCacheBytes = "/d/config", 1048576 }),
		honoured: "RUNTIME_ROOT,LOCAL_CACHE_SIZE_IN_BYTES",
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := load(t, tt.env, tt.args...)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err || !errors.Is(err, ratelimitenv.ErrVariable) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want, err := DefaultSettings()
			if err != nil {
				t.Fatal(err)
			}
			tt.want(&want)
			report := got.ratelimitEnv
			got.ratelimitEnv, want.ratelimitEnv = ratelimitenv.Report{}, ratelimitenv.Report{}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("settings\n got %+v\nwant %+v", got, want)
			}
			if h := strings.Join(report.Honoured, ","); h != tt.honoured {
				t.Errorf("honoured %q, want %q", h, tt.honoured)
			}
			if !slices.Equal(report.Warnings, tt.warnings) {
				t.Errorf("warnings\n got %q\nwant %q", report.Warnings, tt.warnings)
			}
		})
	}
}
