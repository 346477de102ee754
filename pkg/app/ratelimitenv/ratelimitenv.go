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
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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
