package app

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/record"
	"github.com/tollgatehq/tollgate/pkg/signature"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
	"github.com/tollgatehq/tollgate/pkg/telemetry"
	"github.com/tollgatehq/tollgate/pkg/top"
	topredis "github.com/tollgatehq/tollgate/pkg/top/redis"
)

// The groups of Settings, in the order of serve's help. Each declares
// its flags and checks its own values.

// ListenSettings are the addresses tollgate listens on.
type ListenSettings struct {
	GRPC  string `mapstructure:"grpc-addr"`
	HTTP  string `mapstructure:"http-addr"`
	Admin string `mapstructure:"admin-addr"` // opened only when the admin API is on
	Debug string `mapstructure:"debug-addr"` // "" disables the debug server
}

func (ListenSettings) flags(fs *pflag.FlagSet) {
	fs.String("grpc-addr", ":8081", "gRPC listen address (RateLimitService and health)")
	fs.String("http-addr", ":8080", "HTTP listen address (/json, /v1/check, health, /metrics)")
	fs.String("admin-addr", "127.0.0.1:8082", "admin API listen address (overrides, remaining, reset, audit), opened when an admin token is configured")
	fs.String("debug-addr", "127.0.0.1:6070", "debug listen address (/debug/config, pprof); empty disables it")
}

// maxStreams bounds --grpc-max-concurrent-streams: HTTP/2 counts streams
// in 31 bits, and Envoy takes no more.
const maxStreams = 1<<31 - 1

// ConnectionSettings bound what one client may hold of the HTTP, debug
// and gRPC servers: how long a slow client keeps an HTTP connection, how
// many HTTP connections there are, and how long a gRPC connection lives,
// how often its client may ping and how many calls it carries at once.
// Zero means no bound, but for the keepalive interval and the streams.
type ConnectionSettings struct {
	HTTPReadTimeout  time.Duration `mapstructure:"http-read-timeout"`
	HTTPWriteTimeout time.Duration `mapstructure:"http-write-timeout"`
	HTTPIdleTimeout  time.Duration `mapstructure:"http-idle-timeout"`
	HTTPMaxConns     int           `mapstructure:"http-max-connections"`
	// GRPCMaxAge and GRPCMaxAgeGrace are grpc-go's
	// keepalive.ServerParameters of the same names: zero is forever.
	GRPCMaxAge      time.Duration `mapstructure:"grpc-max-connection-age"`
	GRPCMaxAgeGrace time.Duration `mapstructure:"grpc-max-connection-age-grace"`
	// GRPCKeepaliveMinTime is the MinTime of the keepalive enforcement
	// policy.
	GRPCKeepaliveMinTime time.Duration `mapstructure:"grpc-keepalive-min-time"`
	GRPCMaxStreams       int           `mapstructure:"grpc-max-concurrent-streams"`
}

func (ConnectionSettings) flags(fs *pflag.FlagSet) {
	fs.Duration("http-read-timeout", 10*time.Second, "HTTP and debug: longest time to read a whole request, body included; its headers must come within 5s, or this if shorter (0: no limit)")
	fs.Duration("http-write-timeout", 30*time.Second, "HTTP and debug: longest time from the end of a request's headers to the end of its answer, body read included (0: no limit)")
	fs.Duration("http-idle-timeout", 60*time.Second, "HTTP and debug: how long a kept-alive connection may wait for its next request (0: no limit)")
	fs.Int("http-max-connections", 4096, "HTTP: most connections open at once; further ones wait in the kernel's queue until one closes (0: no limit)")
	fs.Duration("grpc-max-connection-age", 0, "gRPC: a connection this old (±10%) is sent GOAWAY, so its client reconnects, perhaps to another instance (0: never)")
	fs.Duration("grpc-max-connection-age-grace", 0, "gRPC: how long calls in flight may finish on a connection sent GOAWAY for its age before it is closed (0: as long as they take)")
	fs.Duration("grpc-keepalive-min-time", 10*time.Second, "gRPC: shortest interval at which a client may send keepalive pings, with or without calls in flight; one that pings more often is sent GOAWAY")
	fs.Int("grpc-max-concurrent-streams", 1024, "gRPC: most calls in flight on one connection; Envoy opens another connection beyond it (1024 is Envoy's own default)")
}

func (c ConnectionSettings) validate() []error {
	var errs []error
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"http-read-timeout", c.HTTPReadTimeout}, {"http-write-timeout", c.HTTPWriteTimeout}, {"http-idle-timeout", c.HTTPIdleTimeout},
		{"grpc-max-connection-age", c.GRPCMaxAge}, {"grpc-max-connection-age-grace", c.GRPCMaxAgeGrace},
	} {
		if d.d < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %v", d.name, d.d))
		}
	}
	if c.HTTPMaxConns < 0 {
		errs = append(errs, fmt.Errorf("http-max-connections: must not be negative, got %d", c.HTTPMaxConns))
	}
	// A zero MinTime is grpc-go's default of five minutes: not what zero
	// says elsewhere here.
	if c.GRPCKeepaliveMinTime <= 0 {
		errs = append(errs, fmt.Errorf("grpc-keepalive-min-time: must be positive, got %v", c.GRPCKeepaliveMinTime))
	}
	if c.GRPCMaxStreams > maxStreams {
		errs = append(errs, fmt.Errorf("grpc-max-concurrent-streams: must be at most %d, got %d", maxStreams, c.GRPCMaxStreams))
	}
	return append(errs, positive(count{"grpc-max-concurrent-streams", c.GRPCMaxStreams})...)
}

// readHeaderTimeout bounds how long the HTTP servers wait for a
// request's headers.
const readHeaderTimeout = 5 * time.Second

// httpServer returns an HTTP server of handler (the HTTP API's or the
// debug one's), with the timeouts the settings ask for. Its headers must
// come within readHeaderTimeout, or the read timeout if that is shorter.
// A zero idle timeout is no limit, where net/http would take the read
// timeout for it.
func (c ConnectionSettings) httpServer(handler http.Handler) *http.Server {
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       c.HTTPReadTimeout,
		WriteTimeout:      c.HTTPWriteTimeout,
		IdleTimeout:       c.HTTPIdleTimeout,
	}
	if c.HTTPReadTimeout > 0 {
		srv.ReadHeaderTimeout = min(readHeaderTimeout, c.HTTPReadTimeout)
	}
	if c.HTTPIdleTimeout == 0 {
		srv.IdleTimeout = -1
	}
	return srv
}

// httpListener bounds the connections lis accepts at once, if the
// settings ask it to.
func (c ConnectionSettings) httpListener(lis net.Listener) net.Listener {
	if c.HTTPMaxConns == 0 {
		return lis
	}
	return netutil.LimitListener(lis, c.HTTPMaxConns)
}

// grpcOptions return the gRPC server's bounds on its connections.
// Pings: Envoy sends none unless its cluster sets connection_keepalive,
// and then at that interval whether calls are in flight or not, so pings
// are allowed without calls; grpc-go's defaults (one every 5 minutes,
// none without calls for 2 hours) would close an idle connection of such
// an Envoy after three pings.
func (c ConnectionSettings) grpcOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: c.GRPCKeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: c.GRPCMaxAge, MaxConnectionAgeGrace: c.GRPCMaxAgeGrace}),
		grpc.MaxConcurrentStreams(uint32(c.GRPCMaxStreams)), // validate bounds it
	}
}

// TrustSettings name the sources tollgate trusts with charge markers
// (tollgate.charge, "charge") and refunds (is_negative_hits, "refund"),
// with which a caller can lock a client out or erase its counter: "grpc",
// the RateLimitService (Envoy, which the gRPC listener's TLS or a network
// policy should admit alone), "san:NAME", the RateLimitService's callers
// whose verified client certificate carries NAME (with mutual TLS), and
// "http", /v1/check and /json on the HTTP listener. Any other source's are
// refused: InvalidArgument, or 400.
type TrustSettings struct {
	Sources []string `mapstructure:"trusted-sources"`
}

// sanSource prefixes a trusted source that is a client certificate's
// subject alternative name.
const sanSource = "san:"

func (TrustSettings) flags(fs *pflag.FlagSet) {
	fs.StringSlice("trusted-sources", []string{"grpc"}, "sources whose charge markers (tollgate.charge, \"charge\") and refunds (is_negative_hits, \"refund\") are honoured: grpc (every RateLimitService caller), san:NAME (a RateLimitService caller whose client certificate carries NAME; needs --grpc-tls-client-ca), http (/v1/check and /json); others are refused")
}

func (t TrustSettings) validate() []error {
	var errs []error
	for _, src := range t.Sources {
		switch name, isSAN := strings.CutPrefix(src, sanSource); {
		case isSAN && name == "":
			errs = append(errs, fmt.Errorf("trusted-sources: %q names no subject alternative name", src))
		case isSAN && t.trusts("grpc"):
			errs = append(errs, fmt.Errorf("trusted-sources: %q with grpc, which trusts every gRPC caller: list san:NAME alone to trust only those callers", src))
		case !isSAN && src != "grpc" && src != "http":
			errs = append(errs, fmt.Errorf("trusted-sources: unknown source %q (want grpc, http or san:NAME)", src))
		}
	}
	return errs
}

// trusts reports whether src is a trusted source.
func (t TrustSettings) trusts(src string) bool { return slices.Contains(t.Sources, src) }

// sans returns the subject alternative names of the trusted sources.
func (t TrustSettings) sans() []string {
	var names []string
	for _, src := range t.Sources {
		if name, ok := strings.CutPrefix(src, sanSource); ok && name != "" {
			names = append(names, name)
		}
	}
	return names
}

// RuleSettings are the defaults of rules that name none (nor their
// domain's defaults), and the global shadow mode. Settings.descriptorOptions
// checks and parses them.
type RuleSettings struct {
	DefaultAlgorithm string `mapstructure:"default-algorithm"`
	DefaultCharge    string `mapstructure:"default-charge"`
	// Precision is strict or cached.
	Precision  string `mapstructure:"precision"`
	ShadowMode bool   `mapstructure:"shadow-mode"`
}

func (RuleSettings) flags(fs *pflag.FlagSet) {
	fs.String("default-algorithm", "token_bucket", "algorithm of rules that name none: token_bucket, fixed_window, sliding_window_counter, sliding_window_log")
	fs.String("default-charge", "admitted", "charge of limits that name none: admitted (a rejected hit takes nothing) or always (the cost is added whatever the answer); always by default in envoyproxy/ratelimit's environment and with --config-type xds")
	fs.String("precision", "strict", "precision of limits that name none: strict (every decision in redis) or cached (most decisions from a lease of hits reserved from redis; never more than the limit); no effect with the memory store")
	fs.Bool("shadow-mode", false, "count and report, but never reject (global shadow mode)")
}

// AnswerSettings choose what every answer carries besides its codes.
type AnswerSettings struct {
	// Headers is the rate-limit response header style
	// (limiter.ParseHeaderStyle).
	Headers string `mapstructure:"response-headers"`
	// DynamicMetadata and DecisionMetadata choose the parts of every
	// answer's dynamic_metadata (rls.Options).
	DynamicMetadata  bool `mapstructure:"response-dynamic-metadata"`
	DecisionMetadata bool `mapstructure:"decision-metadata"`
}

func (AnswerSettings) flags(fs *pflag.FlagSet) {
	fs.String("response-headers", "xratelimit", "rate-limit response headers: none, draft03, xratelimit, ietf")
	fs.Bool("response-dynamic-metadata", false, "add envoyproxy/ratelimit's dynamic metadata to every answer: domain, descriptors, hitsAddend and the passing rules' metadata")
	fs.Bool("decision-metadata", true, "add the key \"tollgate\" to every answer's dynamic metadata: per descriptor the rule that decided it, its code and what remains")
}

func (a AnswerSettings) validate() []error {
	if _, err := limiter.ParseHeaderStyle(a.Headers); err != nil {
		return []error{fmt.Errorf("response-headers: %w", err)}
	}
	return nil
}

// LogSettings choose the service's log.
type LogSettings struct {
	Level  string `mapstructure:"log-level"`
	Format string `mapstructure:"log-format"` // text or json
}

func (LogSettings) flags(fs *pflag.FlagSet) {
	fs.String("log-level", "info", "log level: debug, info, warn, error")
	fs.String("log-format", "text", "log format: text, json")
}

func (l LogSettings) validate() []error {
	var errs []error
	if _, err := parseLevel(l.Level); err != nil {
		errs = append(errs, fmt.Errorf("log-level: %w", err))
	}
	if l.Format != "text" && l.Format != "json" {
		errs = append(errs, fmt.Errorf("log-format: unknown format %q (want text or json)", l.Format))
	}
	return errs
}

// NewLogger returns the logger the settings ask for, writing to w.
func (l LogSettings) NewLogger(w io.Writer) (*slog.Logger, error) {
	level, err := parseLevel(l.Level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

// ValueSettings choose how descriptor values, often API keys, show on
// the surfaces operators read: the logs, the audit, the admin API's
// answers and /debug/config (descriptor.ValueView). What Envoy is
// answered, and what Redis and the state file keep, is not changed.
type ValueSettings struct {
	DescriptorValues string `mapstructure:"descriptor-values"`
}

func (ValueSettings) flags(fs *pflag.FlagSet) {
	fs.String("descriptor-values", "plain", "how logs, the audit, admin answers and /debug/config show descriptor values: plain (as they are) or hash (sha256: and 12 hex digits of their SHA-256); keys show as they are")
}

func (v ValueSettings) validate() []error {
	if _, err := descriptor.ParseValueView(v.DescriptorValues); err != nil {
		return []error{fmt.Errorf("descriptor-values: %w", err)}
	}
	return nil
}

// view returns the value view the settings ask for; validate has checked
// it.
func (v ValueSettings) view() descriptor.ValueView {
	view, _ := descriptor.ParseValueView(v.DescriptorValues)
	return view
}

// TracingSettings choose where spans go and how many are sampled
// (TracingSettings.telemetryOptions).
type TracingSettings struct {
	Endpoint     string        `mapstructure:"tracing-endpoint"`
	SampleRatio  float64       `mapstructure:"tracing-sample-ratio"`
	BatchTimeout time.Duration `mapstructure:"tracing-batch-timeout"`
}

func (TracingSettings) flags(fs *pflag.FlagSet) {
	fs.String("tracing-endpoint", "", "URL of the OTLP/gRPC receiver spans are exported to (http://host:4317 plaintext, https:// TLS); empty: as OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_TRACES_EXPORTER say, else no tracing")
	fs.Float64("tracing-sample-ratio", 1, "fraction of the traces started here that are sampled; a caller's sampled trace context is always followed (at 1, OTEL_TRACES_SAMPLER decides when set)")
	fs.Duration("tracing-batch-timeout", 0, "longest a finished span waits to be exported (0: OTEL_BSP_SCHEDULE_DELAY, else 5s)")
}

func (t TracingSettings) validate() []error {
	var errs []error
	if t.Endpoint != "" {
		if u, err := url.Parse(t.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("tracing-endpoint: want an http:// or https:// URL such as http://otel-collector:4317, got %q", t.Endpoint))
		}
	}
	if !(t.SampleRatio >= 0 && t.SampleRatio <= 1) {
		errs = append(errs, fmt.Errorf("tracing-sample-ratio: must be between 0 and 1, got %v", t.SampleRatio))
	}
	if t.BatchTimeout < 0 {
		errs = append(errs, fmt.Errorf("tracing-batch-timeout: must not be negative, got %v", t.BatchTimeout))
	}
	return errs
}

// telemetryOptions returns the telemetry the settings ask for. The
// sampler is parent-based: a call whose trace context says sampled is
// traced, so Envoy's sampling decision holds through tollgate, and the
// ratio applies to traces tollgate starts. The default ratio, 1, leaves
// the sampler to OTEL_TRACES_SAMPLER, whose own default is the same.
func (t TracingSettings) telemetryOptions() telemetry.Options {
	opts := telemetry.Options{TracesEndpoint: t.Endpoint, BatchTimeout: t.BatchTimeout}
	if t.SampleRatio != 1 {
		opts.Sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.SampleRatio))
	}
	return opts
}

// GRPCTLSSettings serve gRPC over TLS, optionally mutual.
type GRPCTLSSettings struct {
	Cert      string `mapstructure:"grpc-tls-cert"`
	Key       string `mapstructure:"grpc-tls-key"`
	ClientCA  string `mapstructure:"grpc-tls-client-ca"`
	ClientSAN string `mapstructure:"grpc-tls-client-san"`
}

func (GRPCTLSSettings) flags(fs *pflag.FlagSet) { serverTLS{}.flags(fs, "grpc", "gRPC") }

func (g GRPCTLSSettings) validate() []error { return serverTLS(g).validate("grpc") }

// AdminTLSSettings serve the admin API over TLS, optionally mutual.
type AdminTLSSettings struct {
	Cert      string `mapstructure:"admin-tls-cert"`
	Key       string `mapstructure:"admin-tls-key"`
	ClientCA  string `mapstructure:"admin-tls-client-ca"`
	ClientSAN string `mapstructure:"admin-tls-client-san"`
}

func (AdminTLSSettings) flags(fs *pflag.FlagSet) { serverTLS{}.flags(fs, "admin", "admin API") }

func (g AdminTLSSettings) validate() []error { return serverTLS(g).validate("admin") }

// serverTLS are the TLS settings of one server, whose flags are named
// after it: PREFIX-tls-cert and so on.
type serverTLS struct{ Cert, Key, ClientCA, ClientSAN string }

func (serverTLS) flags(fs *pflag.FlagSet, prefix, server string) {
	fs.String(prefix+"-tls-cert", "", "PEM certificate chain of the "+server+" server; with --"+prefix+"-tls-key, serve it over TLS (re-read when the file changes)")
	fs.String(prefix+"-tls-key", "", "PEM private key of --"+prefix+"-tls-cert")
	fs.String(prefix+"-tls-client-ca", "", "PEM CA certificates; "+server+" clients must present a certificate signed by one (mutual TLS)")
	fs.String(prefix+"-tls-client-san", "", "a subject alternative name "+server+" client certificates must carry: DNS name, IP or URI (needs --"+prefix+"-tls-client-ca)")
}

// validate reports incomplete TLS settings. Whether the files load is
// checked when the server starts.
func (t serverTLS) validate(prefix string) []error {
	var errs []error
	if (t.Cert == "") != (t.Key == "") {
		errs = append(errs, fmt.Errorf("%[1]s-tls-cert, %[1]s-tls-key: set both or neither", prefix))
	}
	if t.ClientCA != "" && t.Cert == "" {
		errs = append(errs, fmt.Errorf("%[1]s-tls-client-ca: needs %[1]s-tls-cert and %[1]s-tls-key", prefix))
	}
	if t.ClientSAN != "" && t.ClientCA == "" {
		errs = append(errs, fmt.Errorf("%[1]s-tls-client-san: needs %[1]s-tls-client-ca", prefix))
	}
	return errs
}

// RedisSettings reach the Redis store and tune it; they matter only with
// the redis store.
type RedisSettings struct {
	Type          string        `mapstructure:"redis-type"`
	Addrs         []string      `mapstructure:"redis-addrs"`
	MasterName    string        `mapstructure:"redis-master-name"`
	DB            int           `mapstructure:"redis-db"`
	Username      string        `mapstructure:"redis-username"`
	Password      Secret        `mapstructure:"redis-password"` // TOLLGATE_REDIS_PASSWORD or the settings file; never a flag
	PasswordFile  string        `mapstructure:"redis-password-file"`
	TLS           bool          `mapstructure:"redis-tls"`
	TLSCA         string        `mapstructure:"redis-tls-ca"`
	TLSCert       string        `mapstructure:"redis-tls-cert"`
	TLSKey        string        `mapstructure:"redis-tls-key"`
	TLSServerName string        `mapstructure:"redis-tls-server-name"`
	PoolSize      int           `mapstructure:"redis-pool-size"`
	DialTimeout   time.Duration `mapstructure:"redis-dial-timeout"`
	Timeout       time.Duration `mapstructure:"redis-timeout"`
	KeyPrefix     string        `mapstructure:"redis-key-prefix"`
	BatchWindow   time.Duration `mapstructure:"redis-batch-window"`
	// OverLimitCacheBytes sizes the over-limit cache; 0 turns it off.
	OverLimitCacheBytes int64 `mapstructure:"over-limit-cache-bytes"`
}

func (RedisSettings) flags(fs *pflag.FlagSet) {
	fs.String("redis-type", "single", "redis deployment: single, sentinel or cluster")
	fs.StringSlice("redis-addrs", []string{"127.0.0.1:6379"}, "redis addresses (host:port, or a redis:// or rediss:// URL for single); sentinel: the sentinels; cluster: seed nodes")
	fs.String("redis-master-name", "", "sentinel: the monitored master's name")
	fs.Int("redis-db", 0, "redis database number (single and sentinel)")
	fs.String("redis-username", "", "redis ACL user name")
	fs.String("redis-password-file", "", "file holding the redis password (or set TOLLGATE_REDIS_PASSWORD)")
	fs.Bool("redis-tls", false, "connect to redis over TLS")
	fs.String("redis-tls-ca", "", "PEM file of the CA that signed the redis server certificate (default: system roots)")
	fs.String("redis-tls-cert", "", "PEM client certificate for mutual TLS")
	fs.String("redis-tls-key", "", "PEM client key for mutual TLS")
	fs.String("redis-tls-server-name", "", "server name to verify in the redis certificate (default: the address host)")
	fs.Int("redis-pool-size", 0, "connections per redis node (0: go-redis default, 10 per CPU)")
	fs.Duration("redis-dial-timeout", time.Second, "redis connect timeout")
	fs.Duration("redis-timeout", 100*time.Millisecond, "redis read and write timeout")
	fs.String("redis-key-prefix", "tg", "prefix of every redis key")
	fs.Duration("redis-batch-window", 0, "how long concurrent decisions wait to share a redis round trip (0: the store's default; negative: no batching)")
	fs.Int64("over-limit-cache-bytes", 0, "redis: memory for counters known to be over their limit, answered locally until their reset (0: off)")
}

// validate checks what the redis settings say whatever the store;
// Settings.Validate checks the client's settings with the redis store.
func (r RedisSettings) validate() []error {
	if r.OverLimitCacheBytes < 0 {
		return []error{fmt.Errorf("over-limit-cache-bytes: must not be negative, got %d", r.OverLimitCacheBytes)}
	}
	return nil
}

// clientConfig returns the redis client settings, checked.
func (r RedisSettings) clientConfig() (redis.ClientConfig, error) {
	cfg := redis.ClientConfig{
		Type: r.Type, Addrs: r.Addrs, MasterName: r.MasterName, DB: r.DB,
		Username: r.Username, Password: string(r.Password),
		TLS: r.TLS, CAFile: r.TLSCA, CertFile: r.TLSCert, KeyFile: r.TLSKey, ServerName: r.TLSServerName,
		PoolSize: r.PoolSize, DialTimeout: r.DialTimeout, ReadTimeout: r.Timeout, WriteTimeout: r.Timeout,
	}
	if err := cfg.Validate(); err != nil {
		return redis.ClientConfig{}, fmt.Errorf("redis: %w", err)
	}
	return cfg, nil
}

// LeaseSettings tune precision cached (cached.Options.RenewInterval,
// Lifetime and MaxLifetime).
type LeaseSettings struct {
	Interval    time.Duration `mapstructure:"lease-interval"`
	Lifetime    time.Duration `mapstructure:"lease-lifetime"`
	MaxLifetime time.Duration `mapstructure:"lease-max-lifetime"`
}

func (LeaseSettings) flags(fs *pflag.FlagSet) {
	fs.Duration("lease-interval", 100*time.Millisecond, "precision cached: the span of local demand a lease is sized for, and how often leases are renewed and expired ones returned")
	fs.Duration("lease-lifetime", 0, "precision cached: how long a token-bucket lease granted from a bucket at most half full may be spent; while a bucket stays so, the fleet admits in any interval d at most what the bucket admits in d + this (0: 5 × --lease-interval)")
	fs.Duration("lease-max-lifetime", 30*time.Second, "precision cached: how long a token-bucket lease granted from a full bucket may be spent (fuller than half: in proportion between --lease-lifetime and this)")
}

func (l LeaseSettings) validate() []error {
	var errs []error
	if l.Interval <= 0 {
		errs = append(errs, fmt.Errorf("lease-interval: must be positive, got %v", l.Interval))
	}
	if l.Lifetime < 0 {
		errs = append(errs, fmt.Errorf("lease-lifetime: must not be negative, got %v", l.Lifetime))
	}
	if l.MaxLifetime < 0 {
		errs = append(errs, fmt.Errorf("lease-max-lifetime: must not be negative, got %v", l.MaxLifetime))
	}
	return errs
}

// maxBreakerCount bounds --breaker-failures and --breaker-probes, which
// the breaker counts in uint32.
const maxBreakerCount = 1_000_000

// FailureSettings bound the wait for the store and choose how tollgate
// answers without it: deadlines, the circuit breaker and the local
// fallback.
type FailureSettings struct {
	StoreTimeout   time.Duration `mapstructure:"store-timeout"`
	DeadlineMargin time.Duration `mapstructure:"deadline-margin"`
	// Mode is the failure mode of rules that name none: open, closed or
	// local (Settings.descriptorOptions checks it).
	Mode                 string        `mapstructure:"failure-mode"`
	BreakerFailures      int           `mapstructure:"breaker-failures"`
	BreakerOpenTime      time.Duration `mapstructure:"breaker-open-time"`
	BreakerProbes        int           `mapstructure:"breaker-probes"`
	BreakerNotServing    bool          `mapstructure:"breaker-not-serving"`
	LocalFallbackShare   int           `mapstructure:"local-fallback-share"`
	LocalFallbackMaxKeys int           `mapstructure:"local-fallback-max-keys"`
}

func (FailureSettings) flags(fs *pflag.FlagSet) {
	fs.Duration("store-timeout", 50*time.Millisecond, "redis: longest wait for one decision; a caller's earlier deadline (less --deadline-margin) wins")
	fs.Duration("deadline-margin", limiter.DefaultDeadlineMargin, "time kept from a caller's deadline to answer in")
	fs.String("failure-mode", "open", "how rules that name no failure_mode answer while redis fails: open, closed or local")
	fs.Int("breaker-failures", 5, "redis: consecutive failed decisions that open the circuit breaker")
	fs.Duration("breaker-open-time", 2*time.Second, "redis: how long the open breaker answers without redis before it probes")
	fs.Int("breaker-probes", 1, "redis: decisions let through to probe a half-open breaker; all must succeed to close it")
	fs.Bool("breaker-not-serving", false, "report NOT_SERVING (gRPC health and /readyz) while the breaker is open")
	fs.Int("local-fallback-share", 1, "failure mode local: the instances expected to share the load; each enforces limit / share")
	fs.Int("local-fallback-max-keys", 100_000, "failure mode local: most counters kept in memory")
}

func (f FailureSettings) validate() []error {
	var errs []error
	if f.StoreTimeout <= 0 {
		errs = append(errs, fmt.Errorf("store-timeout: must be positive, got %v", f.StoreTimeout))
	}
	if f.DeadlineMargin <= 0 {
		errs = append(errs, fmt.Errorf("deadline-margin: must be positive, got %v", f.DeadlineMargin))
	}
	if f.BreakerOpenTime <= 0 {
		errs = append(errs, fmt.Errorf("breaker-open-time: must be positive, got %v", f.BreakerOpenTime))
	}
	for _, c := range []count{{"breaker-failures", f.BreakerFailures}, {"breaker-probes", f.BreakerProbes}} {
		if c.n > maxBreakerCount {
			errs = append(errs, fmt.Errorf("%s: must be at most %d, got %d", c.name, maxBreakerCount, c.n))
		}
	}
	return append(errs, positive(
		count{"breaker-failures", f.BreakerFailures}, count{"breaker-probes", f.BreakerProbes},
		count{"local-fallback-share", f.LocalFallbackShare}, count{"local-fallback-max-keys", f.LocalFallbackMaxKeys})...)
}

// LimitSettings bound what one instance keeps and what one request may
// ask.
type LimitSettings struct {
	MemoryMaxKeys  int `mapstructure:"memory-max-keys"`
	MaxDescriptors int `mapstructure:"max-descriptors"`
	MaxEntries     int `mapstructure:"max-entries"`
	MaxKeyLen      int `mapstructure:"max-key-length"`
	MaxValueLen    int `mapstructure:"max-value-length"`
	MaxHits        int `mapstructure:"max-hits"`
	MaxPatterns    int `mapstructure:"max-patterns"`
}

func (LimitSettings) flags(fs *pflag.FlagSet) {
	fs.Int("memory-max-keys", 1_000_000, "memory store: most counters kept; the idlest are evicted beyond it")
	fs.Int("max-descriptors", 64, "most descriptors in one request")
	fs.Int("max-entries", 32, "most entries in one descriptor")
	fs.Int("max-key-length", 256, "longest descriptor entry key, in bytes")
	fs.Int("max-value-length", 4096, "longest descriptor entry value, in bytes")
	fs.Int("max-hits", limiter.DefaultMaxHits, "largest hits_addend, of a request or a descriptor (the default is Envoy's own cap)")
	fs.Int("max-patterns", 1000, "most wildcard values of one key at one level of the configuration (allow and deny lists)")
}

func (l LimitSettings) validate() []error {
	return positive(
		count{"memory-max-keys", l.MemoryMaxKeys}, count{"max-descriptors", l.MaxDescriptors}, count{"max-entries", l.MaxEntries},
		count{"max-key-length", l.MaxKeyLen}, count{"max-value-length", l.MaxValueLen},
		count{"max-hits", l.MaxHits}, count{"max-patterns", l.MaxPatterns})
}

// TopSettings size the heavy-hitter summaries behind the admin API's
// top clients and rule rates (package top), and how often an instance
// shares its own with the fleet through Redis.
type TopSettings struct {
	// Capacity is K, the counters of each summary; 0 turns them off.
	Capacity int `mapstructure:"top-capacity"`
	// Publish is how often an instance publishes its summaries to Redis;
	// they live three times as long.
	Publish time.Duration `mapstructure:"top-publish-interval"`
}

func (TopSettings) flags(fs *pflag.FlagSet) {
	fs.Int("top-capacity", top.DefaultCapacity, "counters per rule and interval of the top-clients summaries: every value with more than 1/N of a rule's decisions is named, counts overstated by at most 1/N of them (0: off)")
	fs.Duration("top-publish-interval", topredis.DefaultInterval, "redis: how often an instance shares its top-clients summaries with the fleet; one that stops drops out after three times this")
}

func (t TopSettings) validate() []error {
	var errs []error
	if t.Capacity < 0 || t.Capacity > top.MaxCapacity {
		errs = append(errs, fmt.Errorf("top-capacity: must be between 0 (off) and %d, got %d", top.MaxCapacity, t.Capacity))
	}
	if t.Publish <= 0 {
		errs = append(errs, fmt.Errorf("top-publish-interval: must be positive, got %v", t.Publish))
	}
	return errs
}

// RecordSettings configure the traffic recorder (package record): the
// file it writes, from the start and when the admin API starts a
// recording, which clients it samples, and the file's bound.
type RecordSettings struct {
	// File is the recording file; "" turns the recorder off.
	File string `mapstructure:"record-file"`
	// Sample is the share of clients recorded, in (0, 1].
	Sample float64 `mapstructure:"record-sample"`
	// Key names the entry whose value is the client; "" means each
	// domain's shard_by key, else the first entry.
	Key string `mapstructure:"record-key"`
	// MaxBytes bounds the file before it rotates to FILE.1.
	MaxBytes int64 `mapstructure:"record-max-bytes"`
	// OnStart starts recording when the process starts; else only the
	// admin API does.
	OnStart bool `mapstructure:"record-on-start"`
}

func (RecordSettings) flags(fs *pflag.FlagSet) {
	fs.String("record-file", "", "record every decided call, as JSON lines, into this file (created 0600; it holds descriptor values such as API keys) from the start and when the admin API starts a recording (empty: off)")
	fs.Float64("record-sample", 1, "share of clients recorded, in (0, 1]: a hash of the client's value decides, so a sampled client's calls are recorded whole")
	fs.String("record-key", "", "the descriptor entry key whose value names the client for --record-sample (empty: each domain's shard_by key, else the first entry)")
	fs.Int64("record-max-bytes", record.DefaultMaxBytes, "size at which the recording file is renamed to FILE.1, replacing the previous one, and a new file begins")
	fs.Bool("record-on-start", true, "with --record-file, record from the start; false: only when the admin API starts a recording (POST /v1/record)")
}

func (r RecordSettings) validate() []error {
	var errs []error
	if !(r.Sample > 0 && r.Sample <= 1) {
		errs = append(errs, fmt.Errorf("record-sample: must be in (0, 1], got %v", r.Sample))
	}
	if r.MaxBytes < 4096 {
		errs = append(errs, fmt.Errorf("record-max-bytes: must be at least 4096, got %d", r.MaxBytes))
	}
	return errs
}

// ShadowSettings configure the shadow rule set (package shadow): a second
// rule set, loaded with the same settings as the live one, that decides
// every live call again without changing its answer.
type ShadowSettings struct {
	// ConfigDir is the shadow rules' directory; "" turns them off.
	ConfigDir string `mapstructure:"shadow-config-dir"`
}

func (ShadowSettings) flags(fs *pflag.FlagSet) {
	fs.String("shadow-config-dir", "", "directory of a shadow rule set, loaded like --config-dir and watched, that decides every live call again on a memory store of its own without changing its answer, counted in tollgate_shadow_* (empty: off)")
}

// count is a setting that counts something, by its flag's name.
type count struct {
	name string
	n    int
}

// positive reports each of counts that is not positive.
func positive(counts ...count) []error {
	var errs []error
	for _, c := range counts {
		if c.n <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %d", c.name, c.n))
		}
	}
	return errs
}

// AdminSettings are the admin API's tokens (the API is off without either)
// and where the audit log goes.
type AdminSettings struct {
	TokenFile string `mapstructure:"admin-token-file"`
	Token     Secret `mapstructure:"admin-token"` // TOLLGATE_ADMIN_TOKEN or the settings file; never a flag
	AuditLog  string `mapstructure:"audit-log"`
}

func (AdminSettings) flags(fs *pflag.FlagSet) {
	fs.String("admin-token-file", "", "file of admin API bearer tokens, one a line as NAME TOKEN or TOKEN alone, re-read when it changes; with it or TOLLGATE_ADMIN_TOKEN the admin API is on, else its paths answer 404")
	fs.String("audit-log", "", "file the audit log (admin changes and reloads, as JSON lines) is appended to; empty: stderr")
}

// OverrideSettings keep the operators' live overrides.
type OverrideSettings struct {
	// StateDir keeps the memory store's overrides across restarts (""
	// keeps them in the process only).
	StateDir string `mapstructure:"state-dir"`
	// MaxTTL bounds an override's expiry.
	MaxTTL time.Duration `mapstructure:"max-override-ttl"`
	// Refresh is how often every override is read again from Redis.
	Refresh time.Duration `mapstructure:"override-refresh-interval"`
}

func (OverrideSettings) flags(fs *pflag.FlagSet) {
	fs.String("state-dir", "", "memory store: directory of the state file that keeps live overrides across restarts (empty: kept in the process only)")
	fs.Duration("max-override-ttl", 720*time.Hour, "longest time an override may be set for")
	fs.Duration("override-refresh-interval", 10*time.Second, "redis: how often every override is read again, besides the changes pushed by pub/sub")
}

func (o OverrideSettings) validate() []error {
	var errs []error
	if o.MaxTTL <= 0 {
		errs = append(errs, fmt.Errorf("max-override-ttl: must be positive, got %v", o.MaxTTL))
	}
	if o.Refresh <= 0 {
		errs = append(errs, fmt.Errorf("override-refresh-interval: must be positive, got %v", o.Refresh))
	}
	return errs
}

// FleetSettings guard what the instances of a fleet share through Redis
// besides counters: the override records and the fleet channel's events.
type FleetSettings struct {
	// HMACKeyFile names the file of the key that signs them; LoadSettings
	// reads it into HMACKey.
	HMACKeyFile string `mapstructure:"fleet-hmac-key-file"`
	// HMACKey comes from HMACKeyFile alone: never a flag, a variable or
	// the settings file.
	HMACKey Secret `mapstructure:"-"`
}

func (FleetSettings) flags(fs *pflag.FlagSet) {
	fs.String("fleet-hmac-key-file", "", "redis: file of a key of at least 32 bytes (a trailing newline is dropped) that signs overrides and fleet events (HMAC-SHA256); with it, unsigned ones are refused. Read at start only: restart to change it")
}

func (f FleetSettings) validate() []error {
	if (f.HMACKeyFile != "" || f.HMACKey != "") && len(f.HMACKey) < signature.MinKeyLen {
		return []error{fmt.Errorf("fleet-hmac-key-file: the key is %d bytes long; at least %d are needed (openssl rand -hex 32 writes one)",
			len(f.HMACKey), signature.MinKeyLen)}
	}
	return nil
}

// key returns the key that signs overrides and fleet events, nil without
// one.
func (f FleetSettings) key() (*signature.Key, error) {
	if f.HMACKey == "" {
		return nil, nil
	}
	key, err := signature.NewKey([]byte(f.HMACKey))
	if err != nil {
		return nil, fmt.Errorf("fleet-hmac-key-file: %w", err)
	}
	return key, nil
}

// readKeyFile returns the key in the file at path, without one trailing
// newline (\n or \r\n).
func readKeyFile(path string) (Secret, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("fleet-hmac-key-file: %w", err)
	}
	key := string(data)
	if k, ok := strings.CutSuffix(key, "\n"); ok {
		key = strings.TrimSuffix(k, "\r")
	}
	return Secret(key), nil
}
