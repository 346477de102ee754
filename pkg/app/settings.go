package app

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/app/ratelimitenv"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/reload"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// Settings configure `tollgate serve`, and `check` and `explain` with it,
// so those judge a configuration as serve would. They come from flags,
// TOLLGATE_* environment variables and an optional settings file, in that
// precedence, always through LoadSettings.
type Settings struct {
	ConfigDir        string `mapstructure:"config-dir"`
	GRPCAddr         string `mapstructure:"grpc-addr"`
	HTTPAddr         string `mapstructure:"http-addr"`
	DebugAddr        string `mapstructure:"debug-addr"`
	Store            string `mapstructure:"store"`
	DefaultAlgorithm string `mapstructure:"default-algorithm"`
	DefaultCharge    string `mapstructure:"default-charge"`
	// Precision is the precision of limits that name none (nor their
	// domain's defaults): strict or cached.
	Precision       string `mapstructure:"precision"`
	ShadowMode      bool   `mapstructure:"shadow-mode"`
	ResponseHeaders string `mapstructure:"response-headers"`
	LogLevel        string `mapstructure:"log-level"`
	LogFormat       string `mapstructure:"log-format"`

	// ResponseDynamicMetadata and DecisionMetadata choose the parts of every
	// answer's dynamic_metadata (rls.Options).
	ResponseDynamicMetadata bool `mapstructure:"response-dynamic-metadata"`
	DecisionMetadata        bool `mapstructure:"decision-metadata"`

	TracingEndpoint     string        `mapstructure:"tracing-endpoint"`
	TracingSampleRatio  float64       `mapstructure:"tracing-sample-ratio"`
	TracingBatchTimeout time.Duration `mapstructure:"tracing-batch-timeout"`

	GRPCTLSCert      string `mapstructure:"grpc-tls-cert"`
	GRPCTLSKey       string `mapstructure:"grpc-tls-key"`
	GRPCTLSClientCA  string `mapstructure:"grpc-tls-client-ca"`
	GRPCTLSClientSAN string `mapstructure:"grpc-tls-client-san"`

	RedisType          string        `mapstructure:"redis-type"`
	RedisAddrs         []string      `mapstructure:"redis-addrs"`
	RedisMasterName    string        `mapstructure:"redis-master-name"`
	RedisDB            int           `mapstructure:"redis-db"`
	RedisUsername      string        `mapstructure:"redis-username"`
	RedisPassword      Secret        `mapstructure:"redis-password"` // TOLLGATE_REDIS_PASSWORD or the settings file; never a flag
	RedisPasswordFile  string        `mapstructure:"redis-password-file"`
	RedisTLS           bool          `mapstructure:"redis-tls"`
	RedisTLSCA         string        `mapstructure:"redis-tls-ca"`
	RedisTLSCert       string        `mapstructure:"redis-tls-cert"`
	RedisTLSKey        string        `mapstructure:"redis-tls-key"`
	RedisTLSServerName string        `mapstructure:"redis-tls-server-name"`
	RedisPoolSize      int           `mapstructure:"redis-pool-size"`
	RedisDialTimeout   time.Duration `mapstructure:"redis-dial-timeout"`
	RedisTimeout       time.Duration `mapstructure:"redis-timeout"`
	RedisKeyPrefix     string        `mapstructure:"redis-key-prefix"`
	RedisBatchWindow   time.Duration `mapstructure:"redis-batch-window"`

	OverLimitCacheBytes int64 `mapstructure:"over-limit-cache-bytes"`

	// LeaseInterval and LeaseLifetime tune precision cached
	// (cached.Options.RenewInterval and Lifetime).
	LeaseInterval time.Duration `mapstructure:"lease-interval"`
	LeaseLifetime time.Duration `mapstructure:"lease-lifetime"`

	StoreTimeout         time.Duration `mapstructure:"store-timeout"`
	DeadlineMargin       time.Duration `mapstructure:"deadline-margin"`
	FailureMode          string        `mapstructure:"failure-mode"`
	BreakerFailures      int           `mapstructure:"breaker-failures"`
	BreakerOpenTime      time.Duration `mapstructure:"breaker-open-time"`
	BreakerProbes        int           `mapstructure:"breaker-probes"`
	BreakerNotServing    bool          `mapstructure:"breaker-not-serving"`
	LocalFallbackShare   int           `mapstructure:"local-fallback-share"`
	LocalFallbackMaxKeys int           `mapstructure:"local-fallback-max-keys"`

	MemoryMaxKeys  int `mapstructure:"memory-max-keys"`
	MaxDescriptors int `mapstructure:"max-descriptors"`
	MaxEntries     int `mapstructure:"max-entries"`
	MaxKeyLen      int `mapstructure:"max-key-length"`
	MaxValueLen    int `mapstructure:"max-value-length"`
	MaxHits        int `mapstructure:"max-hits"`
	MaxPatterns    int `mapstructure:"max-patterns"`

	// AdminTokenFile and AdminToken are the admin API's tokens (the API
	// is off without either); AuditLog is where the audit log goes.
	AdminTokenFile string `mapstructure:"admin-token-file"`
	AdminToken     Secret `mapstructure:"admin-token"` // TOLLGATE_ADMIN_TOKEN or the settings file; never a flag
	AuditLog       string `mapstructure:"audit-log"`

	XDSSettings `mapstructure:",squash"`

	// StateDir keeps the memory store's overrides across restarts (""
	// keeps them in the process only); MaxOverrideTTL bounds an
	// override's expiry; OverrideRefresh is how often every override is
	// read again from Redis.
	StateDir        string        `mapstructure:"state-dir"`
	MaxOverrideTTL  time.Duration `mapstructure:"max-override-ttl"`
	OverrideRefresh time.Duration `mapstructure:"override-refresh-interval"`

	// ratelimitEnv is what loadSettings took from envoyproxy/ratelimit's
	// environment (package ratelimitenv), for New to log.
	ratelimitEnv ratelimitenv.Report
}

// maxBreakerCount bounds --breaker-failures and --breaker-probes, which
// the breaker counts in uint32.
const maxBreakerCount = 1_000_000

// Flags declares every setting as a flag with its default. It declares
// them in a flag set of their own, adds that to fs, which may hold a
// command's other flags, and returns it for LoadSettings.
func Flags(fs *pflag.FlagSet) *pflag.FlagSet {
	outer := fs
	fs = pflag.NewFlagSet(outer.Name(), pflag.ContinueOnError)
	fs.SortFlags = false // so AddFlagSet adds them in the order declared here
	fs.String("settings", "", "optional settings file (YAML, TOML or JSON) with the same names as the flags")
	fs.String("config-dir", "config", "directory of descriptor YAML files, watched for changes")
	fs.String("grpc-addr", ":8081", "gRPC listen address (RateLimitService and health)")
	fs.String("http-addr", ":8080", "HTTP listen address (/json, /v1/check, health, /metrics)")
	fs.String("debug-addr", "127.0.0.1:6070", "debug listen address (/debug/config, pprof); empty disables it")
	fs.String("store", "memory", "counter store: memory (embedded, one instance) or redis (shared by a fleet)")
	fs.String("default-algorithm", "token_bucket", "algorithm of rules that name none: token_bucket, fixed_window, sliding_window_counter, sliding_window_log")
	fs.String("default-charge", "admitted", "charge of limits that name none: admitted (a rejected hit takes nothing) or always (the cost is added whatever the answer); always by default in envoyproxy/ratelimit's environment and with --config-type xds")
	fs.String("precision", "strict", "precision of limits that name none: strict (every decision in redis) or cached (most decisions from a lease of hits reserved from redis; never more than the limit); no effect with the memory store")
	fs.Bool("shadow-mode", false, "count and report, but never reject (global shadow mode)")
	fs.String("response-headers", "xratelimit", "rate-limit response headers: none, draft03, xratelimit, ietf")
	fs.Bool("response-dynamic-metadata", false, "add envoyproxy/ratelimit's dynamic metadata to every answer: domain, descriptors, hitsAddend and the passing rules' metadata")
	fs.Bool("decision-metadata", true, "add the key \"tollgate\" to every answer's dynamic metadata: per descriptor the rule that decided it, its code and what remains")
	fs.String("log-level", "info", "log level: debug, info, warn, error")
	fs.String("log-format", "text", "log format: text, json")
	fs.String("tracing-endpoint", "", "URL of the OTLP/gRPC receiver spans are exported to (http://host:4317 plaintext, https:// TLS); empty: as OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_TRACES_EXPORTER say, else no tracing")
	fs.Float64("tracing-sample-ratio", 1, "fraction of the traces started here that are sampled; a caller's sampled trace context is always followed (at 1, OTEL_TRACES_SAMPLER decides when set)")
	fs.Duration("tracing-batch-timeout", 0, "longest a finished span waits to be exported (0: OTEL_BSP_SCHEDULE_DELAY, else 5s)")
	fs.String("grpc-tls-cert", "", "PEM certificate chain of the gRPC server; with --grpc-tls-key, serve gRPC over TLS (re-read when the file changes)")
	fs.String("grpc-tls-key", "", "PEM private key of --grpc-tls-cert")
	fs.String("grpc-tls-client-ca", "", "PEM CA certificates; gRPC clients must present a certificate signed by one (mutual TLS)")
	fs.String("grpc-tls-client-san", "", "a subject alternative name gRPC client certificates must carry: DNS name, IP or URI (needs --grpc-tls-client-ca)")
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
	fs.Duration("lease-interval", 100*time.Millisecond, "precision cached: the span of local demand a lease is sized for, and how often leases are renewed and expired ones returned")
	fs.Duration("lease-lifetime", 0, "precision cached: longest a token-bucket lease may be spent; the fleet admits in any interval d at most what the bucket admits in d + this (0: 5 × --lease-interval)")
	fs.Duration("store-timeout", 50*time.Millisecond, "redis: longest wait for one decision; a caller's earlier deadline (less --deadline-margin) wins")
	fs.Duration("deadline-margin", 2*time.Millisecond, "time kept from a caller's deadline to answer in")
	fs.String("failure-mode", "open", "how rules that name no failure_mode answer while redis fails: open, closed or local")
	fs.Int("breaker-failures", 5, "redis: consecutive failed decisions that open the circuit breaker")
	fs.Duration("breaker-open-time", 2*time.Second, "redis: how long the open breaker answers without redis before it probes")
	fs.Int("breaker-probes", 1, "redis: decisions let through to probe a half-open breaker; all must succeed to close it")
	fs.Bool("breaker-not-serving", false, "report NOT_SERVING (gRPC health and /readyz) while the breaker is open")
	fs.Int("local-fallback-share", 1, "failure mode local: the instances expected to share the load; each enforces limit / share")
	fs.Int("local-fallback-max-keys", 100_000, "failure mode local: most counters kept in memory")
	fs.Int("memory-max-keys", 1_000_000, "memory store: most counters kept; the idlest are evicted beyond it")
	fs.Int("max-descriptors", 64, "most descriptors in one request")
	fs.Int("max-entries", 32, "most entries in one descriptor")
	fs.Int("max-key-length", 256, "longest descriptor entry key, in bytes")
	fs.Int("max-value-length", 4096, "longest descriptor entry value, in bytes")
	fs.Int("max-hits", limiter.DefaultMaxHits, "largest hits_addend, of a request or a descriptor (the default is Envoy's own cap)")
	fs.Int("max-patterns", 1000, "most wildcard values of one key at one level of the configuration (allow and deny lists)")
	fs.String("admin-token-file", "", "file of admin API bearer tokens, one a line as NAME TOKEN or TOKEN alone, re-read when it changes; with it or TOLLGATE_ADMIN_TOKEN the admin API is on, else its paths answer 404")
	fs.String("audit-log", "", "file the audit log (admin changes and reloads, as JSON lines) is appended to; empty: stderr")
	xdsFlags(fs)
	fs.String("state-dir", "", "memory store: directory of the state file that keeps live overrides across restarts (empty: kept in the process only)")
	fs.Duration("max-override-ttl", 720*time.Hour, "longest time an override may be set for")
	fs.Duration("override-refresh-interval", 10*time.Second, "redis: how often every override is read again, besides the changes pushed by pub/sub")
	outer.AddFlagSet(fs)
	return fs
}

// DefaultSettings returns the settings of `tollgate serve` without flags,
// environment or settings file.
func DefaultSettings() (Settings, error) {
	fs := Flags(pflag.NewFlagSet("defaults", pflag.ContinueOnError))
	return LoadSettings(fs, func(string) string { return "" })
}

// LoadSettings resolves and validates settings from the parsed flags that
// Flags returned, the environment read through getenv and the
// settings file named by --settings. It is the one way every command gets
// its settings.
func LoadSettings(fs *pflag.FlagSet, getenv func(string) string) (Settings, error) {
	v := viper.New()
	if err := v.BindPFlags(fs); err != nil {
		return Settings{}, err
	}
	// An environment variable beats the settings file but not a flag given
	// on the command line. It is read through getenv so tests need not
	// touch the process environment.
	for _, key := range v.AllKeys() {
		if fs.Changed(key) {
			continue
		}
		name := "TOLLGATE_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
		if val := getenv(name); val != "" {
			v.Set(key, val)
		}
	}
	if path := v.GetString("settings"); path != "" {
		v.SetConfigFile(path)
		if err := v.ReadInConfig(); err != nil {
			return Settings{}, fmt.Errorf("reading settings file %s: %w", path, err)
		}
	}
	chargeSet := v.IsSet("default-charge") // before any default below sets it
	report, err := ratelimitenv.Apply(v, getenv)
	if err != nil {
		return Settings{}, err
	}
	// Rules over xDS come from Envoy Gateway, whose cost.response reports
	// envoyproxy/ratelimit charges whatever the answer.
	if !chargeSet && !report.ChargeAlways && v.GetString("config-type") == "xds" {
		v.Set("default-charge", "always")
		report.ChargeAlways, report.XDS = true, true
	}
	var s Settings
	if err := v.Unmarshal(&s); err != nil {
		return Settings{}, fmt.Errorf("decoding settings: %w", err)
	}
	s.ratelimitEnv = report
	if pw := getenv("TOLLGATE_REDIS_PASSWORD"); pw != "" {
		s.RedisPassword = Secret(pw)
	}
	if s.RedisPasswordFile != "" {
		data, err := os.ReadFile(s.RedisPasswordFile)
		if err != nil {
			return Settings{}, fmt.Errorf("redis-password-file: %w", err)
		}
		s.RedisPassword = Secret(strings.TrimRight(string(data), "\r\n"))
	}
	if tok := strings.TrimSpace(getenv("TOLLGATE_ADMIN_TOKEN")); tok != "" {
		s.AdminToken = Secret(tok)
	}
	return s, s.Validate()
}

// Validate reports every invalid setting.
func (s Settings) Validate() error {
	var errs []error
	if s.ConfigDir == "" && s.ConfigType != "xds" {
		errs = append(errs, errors.New("config-dir: must not be empty"))
	}
	if err := s.XDSSettings.validate(); err != nil {
		errs = append(errs, err)
	}
	switch s.Store {
	case "memory":
	case "redis":
		if _, err := s.redisConfig(); err != nil {
			errs = append(errs, err)
		}
	default:
		errs = append(errs, fmt.Errorf("store: unknown store %q (want memory or redis)", s.Store))
	}
	if _, err := algorithm.ParseKind(s.DefaultAlgorithm); err != nil {
		errs = append(errs, fmt.Errorf("default-algorithm: %w", err))
	}
	if _, err := algorithm.ParseCharge(s.DefaultCharge); err != nil {
		errs = append(errs, fmt.Errorf("default-charge: %w", err))
	}
	if _, err := descriptor.ParseFailureMode(s.FailureMode); err != nil {
		errs = append(errs, fmt.Errorf("failure-mode: %w", err))
	}
	if _, err := descriptor.ParsePrecision(s.Precision); err != nil {
		errs = append(errs, fmt.Errorf("precision: %w", err))
	}
	if s.LeaseInterval <= 0 {
		errs = append(errs, fmt.Errorf("lease-interval: must be positive, got %v", s.LeaseInterval))
	}
	if s.LeaseLifetime < 0 {
		errs = append(errs, fmt.Errorf("lease-lifetime: must not be negative, got %v", s.LeaseLifetime))
	}
	if s.StoreTimeout <= 0 {
		errs = append(errs, fmt.Errorf("store-timeout: must be positive, got %v", s.StoreTimeout))
	}
	if s.DeadlineMargin <= 0 {
		errs = append(errs, fmt.Errorf("deadline-margin: must be positive, got %v", s.DeadlineMargin))
	}
	for _, count := range []struct {
		name string
		n    int
	}{{"breaker-failures", s.BreakerFailures}, {"breaker-probes", s.BreakerProbes}} {
		if count.n > maxBreakerCount {
			errs = append(errs, fmt.Errorf("%s: must be at most %d, got %d", count.name, maxBreakerCount, count.n))
		}
	}
	if s.BreakerOpenTime <= 0 {
		errs = append(errs, fmt.Errorf("breaker-open-time: must be positive, got %v", s.BreakerOpenTime))
	}
	if _, err := limiter.ParseHeaderStyle(s.ResponseHeaders); err != nil {
		errs = append(errs, fmt.Errorf("response-headers: %w", err))
	}
	if _, err := parseLevel(s.LogLevel); err != nil {
		errs = append(errs, fmt.Errorf("log-level: %w", err))
	}
	errs = append(errs, s.validateGRPCTLS()...)
	if s.LogFormat != "text" && s.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("log-format: unknown format %q (want text or json)", s.LogFormat))
	}
	if s.TracingEndpoint != "" {
		if u, err := url.Parse(s.TracingEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("tracing-endpoint: want an http:// or https:// URL such as http://otel-collector:4317, got %q", s.TracingEndpoint))
		}
	}
	if !(s.TracingSampleRatio >= 0 && s.TracingSampleRatio <= 1) {
		errs = append(errs, fmt.Errorf("tracing-sample-ratio: must be between 0 and 1, got %v", s.TracingSampleRatio))
	}
	if s.OverLimitCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("over-limit-cache-bytes: must not be negative, got %d", s.OverLimitCacheBytes))
	}
	if s.TracingBatchTimeout < 0 {
		errs = append(errs, fmt.Errorf("tracing-batch-timeout: must not be negative, got %v", s.TracingBatchTimeout))
	}
	for _, bound := range []struct {
		name string
		n    int
	}{
		{"memory-max-keys", s.MemoryMaxKeys}, {"max-descriptors", s.MaxDescriptors}, {"max-entries", s.MaxEntries},
		{"breaker-failures", s.BreakerFailures}, {"breaker-probes", s.BreakerProbes},
		{"local-fallback-share", s.LocalFallbackShare}, {"local-fallback-max-keys", s.LocalFallbackMaxKeys},
		{"max-key-length", s.MaxKeyLen}, {"max-value-length", s.MaxValueLen},
		{"max-hits", s.MaxHits}, {"max-patterns", s.MaxPatterns},
	} {
		if bound.n <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %d", bound.name, bound.n))
		}
	}
	if s.MaxOverrideTTL <= 0 {
		errs = append(errs, fmt.Errorf("max-override-ttl: must be positive, got %v", s.MaxOverrideTTL))
	}
	if s.OverrideRefresh <= 0 {
		errs = append(errs, fmt.Errorf("override-refresh-interval: must be positive, got %v", s.OverrideRefresh))
	}
	return errors.Join(errs...)
}

// validateGRPCTLS reports incomplete gRPC TLS settings. Whether the files
// load is checked when the server starts.
func (s Settings) validateGRPCTLS() []error {
	var errs []error
	if (s.GRPCTLSCert == "") != (s.GRPCTLSKey == "") {
		errs = append(errs, errors.New("grpc-tls-cert, grpc-tls-key: set both or neither"))
	}
	if s.GRPCTLSClientCA != "" && s.GRPCTLSCert == "" {
		errs = append(errs, errors.New("grpc-tls-client-ca: needs grpc-tls-cert and grpc-tls-key"))
	}
	if s.GRPCTLSClientSAN != "" && s.GRPCTLSClientCA == "" {
		errs = append(errs, errors.New("grpc-tls-client-san: needs grpc-tls-client-ca"))
	}
	return errs
}

// descriptorOptions returns the options the descriptor configuration is
// loaded with.
func (s Settings) descriptorOptions() (descriptor.Options, error) {
	kind, err := algorithm.ParseKind(s.DefaultAlgorithm)
	if err != nil {
		return descriptor.Options{}, fmt.Errorf("default-algorithm: %w", err)
	}
	charge, err := algorithm.ParseCharge(s.DefaultCharge)
	if err != nil {
		return descriptor.Options{}, fmt.Errorf("default-charge: %w", err)
	}
	mode, err := descriptor.ParseFailureMode(s.FailureMode)
	if err != nil {
		return descriptor.Options{}, fmt.Errorf("failure-mode: %w", err)
	}
	precision, err := descriptor.ParsePrecision(s.Precision)
	if err != nil {
		return descriptor.Options{}, fmt.Errorf("precision: %w", err)
	}
	return descriptor.Options{
		DefaultAlgorithm: kind, DefaultCharge: charge, DefaultFailureMode: mode, DefaultPrecision: precision,
		MaxPatterns: s.MaxPatterns,
	}, nil
}

// LoadRules loads the descriptor configuration the settings name, as serve
// would load it, for check and explain.
func LoadRules(s Settings) (*descriptor.Tree, error) {
	r, err := newReloader(s, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	return r.Current(), nil
}

// newReloader loads the descriptor configuration in s.ConfigDir and returns
// the reloader that keeps it. serve, check and explain all load through it,
// so they accept and reject a configuration alike, with the same error.
// logger and meters may be nil.
func newReloader(s Settings, logger *slog.Logger, meters metric.MeterProvider, onChange func(*descriptor.Tree)) (*reload.Reloader, error) {
	opts, err := s.descriptorOptions()
	if err != nil {
		return nil, err
	}
	return reload.New(reload.Options{
		Dir: s.ConfigDir,
		Load: func(dir string) (*descriptor.Tree, error) {
			return descriptor.Load(dir, opts)
		},
		Logger:        logger,
		MeterProvider: meters,
		OnChange:      onChange,
	})
}

// redisConfig returns the redis client settings, checked.
func (s Settings) redisConfig() (redis.ClientConfig, error) {
	cfg := redis.ClientConfig{
		Type: s.RedisType, Addrs: s.RedisAddrs, MasterName: s.RedisMasterName, DB: s.RedisDB,
		Username: s.RedisUsername, Password: string(s.RedisPassword),
		TLS: s.RedisTLS, CAFile: s.RedisTLSCA, CertFile: s.RedisTLSCert, KeyFile: s.RedisTLSKey, ServerName: s.RedisTLSServerName,
		PoolSize: s.RedisPoolSize, DialTimeout: s.RedisDialTimeout, ReadTimeout: s.RedisTimeout, WriteTimeout: s.RedisTimeout,
	}
	if err := cfg.Validate(); err != nil {
		return redis.ClientConfig{}, fmt.Errorf("redis: %w", err)
	}
	return cfg, nil
}

// Secret is a setting that must never be printed: it formats and logs as
// "[redacted]".
type Secret string

// String returns "[redacted]", or "" for an empty secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString keeps %#v from printing the secret.
func (s Secret) GoString() string { return s.String() }

// LogValue keeps slog from printing the secret.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// NewLogger returns the logger the settings ask for, writing to w.
func NewLogger(s Settings, w io.Writer) (*slog.Logger, error) {
	level, err := parseLevel(s.LogLevel)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	if s.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}
