package app

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/app/ratelimitenv"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/reload"
)

// Settings configure `tollgate serve`, and `check` and `explain` with it,
// so those judge a configuration as serve would. They come from flags,
// TOLLGATE_* environment variables and an optional settings file, in that
// precedence, always through LoadSettings.
//
// Settings are grouped by what they configure. Each group declares its
// flags (named as its fields' mapstructure tags) and checks its own
// values; a new setting is a field and its flag line in its group, plus a
// check if it needs one. Groups are declared in the order that serve's
// help lists their flags.
type Settings struct {
	// ConfigDir is the directory of the rule files (with ConfigType file).
	ConfigDir string             `mapstructure:"config-dir"`
	Listen    ListenSettings     `mapstructure:",squash"`
	Conns     ConnectionSettings `mapstructure:",squash"`
	Trust     TrustSettings      `mapstructure:",squash"`
	// Store is memory or redis.
	Store     string           `mapstructure:"store"`
	Rules     RuleSettings     `mapstructure:",squash"`
	Answers   AnswerSettings   `mapstructure:",squash"`
	Log       LogSettings      `mapstructure:",squash"`
	Values    ValueSettings    `mapstructure:",squash"`
	Tracing   TracingSettings  `mapstructure:",squash"`
	GRPCTLS   GRPCTLSSettings  `mapstructure:",squash"`
	Redis     RedisSettings    `mapstructure:",squash"`
	Leases    LeaseSettings    `mapstructure:",squash"`
	Failure   FailureSettings  `mapstructure:",squash"`
	Limits    LimitSettings    `mapstructure:",squash"`
	Top       TopSettings      `mapstructure:",squash"`
	Record    RecordSettings   `mapstructure:",squash"`
	Shadow    ShadowSettings   `mapstructure:",squash"`
	Admin     AdminSettings    `mapstructure:",squash"`
	AdminTLS  AdminTLSSettings `mapstructure:",squash"`
	XDS       XDSSettings      `mapstructure:",squash"`
	Overrides OverrideSettings `mapstructure:",squash"`
	Fleet     FleetSettings    `mapstructure:",squash"`

	// ratelimitEnv is what LoadSettings took from envoyproxy/ratelimit's
	// environment (package ratelimitenv), for New to log.
	ratelimitEnv ratelimitenv.Report
}

// Flags declares every setting as a flag with its default. It declares
// them in a flag set of their own, adds that to fs, which may hold a
// command's other flags, and returns it for LoadSettings.
func Flags(fs *pflag.FlagSet) *pflag.FlagSet {
	outer := fs
	fs = pflag.NewFlagSet(outer.Name(), pflag.ContinueOnError)
	fs.SortFlags = false // so AddFlagSet adds them in the order declared here
	fs.String("settings", "", "optional settings file (YAML, TOML or JSON) with the same names as the flags")
	fs.String("config-dir", "config", "directory of descriptor YAML files, watched for changes")
	ListenSettings{}.flags(fs)
	ConnectionSettings{}.flags(fs)
	TrustSettings{}.flags(fs)
	fs.String("store", "memory", "counter store: memory (embedded, one instance) or redis (shared by a fleet)")
	RuleSettings{}.flags(fs)
	AnswerSettings{}.flags(fs)
	LogSettings{}.flags(fs)
	ValueSettings{}.flags(fs)
	TracingSettings{}.flags(fs)
	GRPCTLSSettings{}.flags(fs)
	RedisSettings{}.flags(fs)
	LeaseSettings{}.flags(fs)
	FailureSettings{}.flags(fs)
	LimitSettings{}.flags(fs)
	TopSettings{}.flags(fs)
	RecordSettings{}.flags(fs)
	ShadowSettings{}.flags(fs)
	AdminSettings{}.flags(fs)
	AdminTLSSettings{}.flags(fs)
	XDSSettings{}.flags(fs)
	OverrideSettings{}.flags(fs)
	FleetSettings{}.flags(fs)
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
		s.Redis.Password = Secret(pw)
	}
	if s.Redis.PasswordFile != "" {
		data, err := os.ReadFile(s.Redis.PasswordFile)
		if err != nil {
			return Settings{}, fmt.Errorf("redis-password-file: %w", err)
		}
		s.Redis.Password = Secret(strings.TrimRight(string(data), "\r\n"))
	}
	if s.Fleet.HMACKeyFile != "" {
		if s.Fleet.HMACKey, err = readKeyFile(s.Fleet.HMACKeyFile); err != nil {
			return Settings{}, err
		}
	}
	if tok := strings.TrimSpace(getenv("TOLLGATE_ADMIN_TOKEN")); tok != "" {
		s.Admin.Token = Secret(tok)
	}
	return s, s.Validate()
}

// Validate reports every invalid setting.
func (s Settings) Validate() error {
	var errs []error
	if s.ConfigDir == "" && s.XDS.ConfigType != "xds" {
		errs = append(errs, errors.New("config-dir: must not be empty"))
	}
	if err := s.XDS.validate(); err != nil {
		errs = append(errs, err)
	}
	switch s.Store {
	case "memory":
	case "redis":
		if _, err := s.Redis.clientConfig(); err != nil {
			errs = append(errs, err)
		}
	default:
		errs = append(errs, fmt.Errorf("store: unknown store %q (want memory or redis)", s.Store))
	}
	if _, err := s.descriptorOptions(); err != nil {
		errs = append(errs, err)
	}
	if len(s.Trust.sans()) > 0 && s.GRPCTLS.ClientCA == "" {
		errs = append(errs, errors.New("trusted-sources: san:NAME needs grpc-tls-client-ca: without client certificates no caller carries a name"))
	}
	for _, group := range []interface{ validate() []error }{
		s.Conns, s.Trust, s.Answers, s.Log, s.Values, s.Tracing, s.GRPCTLS, s.Redis, s.Leases, s.Failure, s.Limits, s.Top, s.Record, s.AdminTLS, s.Overrides, s.Fleet,
	} {
		errs = append(errs, group.validate()...)
	}
	return errors.Join(errs...)
}

// descriptorOptions returns the options the descriptor configuration is
// loaded with, or every reason the settings cannot give them.
func (s Settings) descriptorOptions() (descriptor.Options, error) {
	var errs []error
	kind, err := algorithm.ParseKind(s.Rules.DefaultAlgorithm)
	if err != nil {
		errs = append(errs, fmt.Errorf("default-algorithm: %w", err))
	}
	charge, err := algorithm.ParseCharge(s.Rules.DefaultCharge)
	if err != nil {
		errs = append(errs, fmt.Errorf("default-charge: %w", err))
	}
	mode, err := descriptor.ParseFailureMode(s.Failure.Mode)
	if err != nil {
		errs = append(errs, fmt.Errorf("failure-mode: %w", err))
	}
	precision, err := descriptor.ParsePrecision(s.Rules.Precision)
	if err != nil {
		errs = append(errs, fmt.Errorf("precision: %w", err))
	}
	return descriptor.Options{
		DefaultAlgorithm: kind, DefaultCharge: charge, DefaultFailureMode: mode, DefaultPrecision: precision,
		MaxPatterns: s.Limits.MaxPatterns,
	}, errors.Join(errs...)
}

// engineOptions returns the engine's settings that s gives: every field
// of limiter.Options but the store, the rules, the overrides and the
// telemetry.
func (s Settings) engineOptions() (limiter.Options, error) {
	treeOpts, err := s.descriptorOptions()
	if err != nil {
		return limiter.Options{}, err
	}
	style, err := limiter.ParseHeaderStyle(s.Answers.Headers)
	if err != nil {
		return limiter.Options{}, err
	}
	return limiter.Options{
		HeaderStyle:        style,
		ShadowMode:         s.Rules.ShadowMode,
		DefaultAlgorithm:   treeOpts.DefaultAlgorithm,
		DefaultCharge:      treeOpts.DefaultCharge,
		DefaultFailureMode: treeOpts.DefaultFailureMode,
		MaxDescriptors:     s.Limits.MaxDescriptors,
		MaxEntries:         s.Limits.MaxEntries,
		MaxKeyLen:          s.Limits.MaxKeyLen,
		MaxValueLen:        s.Limits.MaxValueLen,
		MaxHits:            uint64(s.Limits.MaxHits),
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
	return newRuleSet(s, reload.Options{Dir: s.ConfigDir, Logger: logger, MeterProvider: meters, OnChange: onChange})
}

// newRuleSet returns the reloader of opts, loading its directory as the
// settings load every rule set: the live one and the shadow one alike.
func newRuleSet(s Settings, opts reload.Options) (*reload.Reloader, error) {
	dopts, err := s.descriptorOptions()
	if err != nil {
		return nil, err
	}
	opts.Load = func(dir string) (*descriptor.Tree, error) {
		return descriptor.Load(dir, dopts)
	}
	return reload.New(opts)
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
