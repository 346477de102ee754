package app

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/limiter"
)

// Settings configure `tollgate serve`. They come from flags, TOLLGATE_*
// environment variables and an optional settings file, in that precedence.
type Settings struct {
	ConfigDir        string `mapstructure:"config-dir"`
	GRPCAddr         string `mapstructure:"grpc-addr"`
	HTTPAddr         string `mapstructure:"http-addr"`
	DebugAddr        string `mapstructure:"debug-addr"`
	Store            string `mapstructure:"store"`
	DefaultAlgorithm string `mapstructure:"default-algorithm"`
	ShadowMode       bool   `mapstructure:"shadow-mode"`
	ResponseHeaders  string `mapstructure:"response-headers"`
	LogLevel         string `mapstructure:"log-level"`
	LogFormat        string `mapstructure:"log-format"`

	MemoryMaxKeys  int `mapstructure:"memory-max-keys"`
	MaxDescriptors int `mapstructure:"max-descriptors"`
	MaxEntries     int `mapstructure:"max-entries"`
	MaxKeyLen      int `mapstructure:"max-key-length"`
	MaxValueLen    int `mapstructure:"max-value-length"`
}

// settingsFlags declares every setting as a flag with its default.
func settingsFlags(fs *pflag.FlagSet) {
	fs.String("settings", "", "optional settings file (YAML, TOML or JSON) with the same names as the flags")
	fs.String("config-dir", "config", "directory of descriptor YAML files, watched for changes")
	fs.String("grpc-addr", ":8081", "gRPC listen address (RateLimitService and health)")
	fs.String("http-addr", ":8080", "HTTP listen address (/json, /v1/check, health, /metrics)")
	fs.String("debug-addr", "127.0.0.1:6070", "debug listen address (/debug/config, pprof); empty disables it")
	fs.String("store", "memory", "counter store: memory")
	fs.String("default-algorithm", "token_bucket", "algorithm of rules that name none: token_bucket, fixed_window, sliding_window_counter, sliding_window_log")
	fs.Bool("shadow-mode", false, "count and report, but never reject (global shadow mode)")
	fs.String("response-headers", "xratelimit", "rate-limit response headers: none, draft03, xratelimit, ietf")
	fs.String("log-level", "info", "log level: debug, info, warn, error")
	fs.String("log-format", "text", "log format: text, json")
	fs.Int("memory-max-keys", 1_000_000, "memory store: most counters kept; the idlest are evicted beyond it")
	fs.Int("max-descriptors", 64, "most descriptors in one request")
	fs.Int("max-entries", 32, "most entries in one descriptor")
	fs.Int("max-key-length", 256, "longest descriptor entry key, in bytes")
	fs.Int("max-value-length", 4096, "longest descriptor entry value, in bytes")
}

// loadSettings resolves settings from the parsed flags, the environment and
// the settings file named by --settings.
func loadSettings(fs *pflag.FlagSet, getenv func(string) string) (Settings, error) {
	v := viper.New()
	if err := v.BindPFlags(fs); err != nil {
		return Settings{}, err
	}
	// Bind each setting to its TOLLGATE_* variable explicitly, reading through
	// getenv so tests need not touch the process environment.
	for _, key := range v.AllKeys() {
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
	// Flags given on the command line win over the environment.
	fs.Visit(func(f *pflag.Flag) { v.Set(f.Name, f.Value.String()) })
	var s Settings
	if err := v.Unmarshal(&s); err != nil {
		return Settings{}, fmt.Errorf("decoding settings: %w", err)
	}
	return s, s.validate()
}

// validate reports every invalid setting.
func (s Settings) validate() error {
	var errs []error
	if s.ConfigDir == "" {
		errs = append(errs, errors.New("config-dir: must not be empty"))
	}
	if s.Store != "memory" {
		errs = append(errs, fmt.Errorf("store: unknown store %q (want memory)", s.Store))
	}
	if _, err := algorithm.ParseKind(s.DefaultAlgorithm); err != nil {
		errs = append(errs, fmt.Errorf("default-algorithm: %w", err))
	}
	if _, err := limiter.ParseHeaderStyle(s.ResponseHeaders); err != nil {
		errs = append(errs, fmt.Errorf("response-headers: %w", err))
	}
	if _, err := parseLevel(s.LogLevel); err != nil {
		errs = append(errs, fmt.Errorf("log-level: %w", err))
	}
	if s.LogFormat != "text" && s.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("log-format: unknown format %q (want text or json)", s.LogFormat))
	}
	for _, bound := range []struct {
		name string
		n    int
	}{
		{"memory-max-keys", s.MemoryMaxKeys}, {"max-descriptors", s.MaxDescriptors}, {"max-entries", s.MaxEntries},
		{"max-key-length", s.MaxKeyLen}, {"max-value-length", s.MaxValueLen},
	} {
		if bound.n <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %d", bound.name, bound.n))
		}
	}
	return errors.Join(errs...)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}
