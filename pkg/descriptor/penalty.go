package descriptor

// This file decodes a limit's penalty (algorithm.Penalty): an escalating
// cooldown for clients that ignore Retry-After.
//
//	rate_limit:
//	  unit: second
//	  requests_per_unit: 10
//	  penalty: {tolerance: 3, cooldown: 10s, factor: 2, max: 15m, forgive_after: 1h}
//
// cooldown is required; tolerance defaults to 0, factor to 2, max to
// DefaultPenaltyMax (or the cooldown, when that is longer) and
// forgive_after to DefaultPenaltyForgiveAfter. Durations are Go
// durations ("90s", "1h30m"). A domain's defaults may hold a penalty,
// which applies to every limit of the domain charged on admission; a
// limit opts out with "penalty: none". A penalty on a limit charged
// always is an error: its hits are usage being reported, which a penalty
// neither blocks nor counts.

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// The penalty defaults.
const (
	// DefaultPenaltyFactor is a penalty's factor when it names none.
	DefaultPenaltyFactor = 2
	// DefaultPenaltyMax is a penalty's max when it names none, unless its
	// cooldown is longer.
	DefaultPenaltyMax = time.Hour
	// DefaultPenaltyForgiveAfter is a penalty's forgive_after when it
	// names none.
	DefaultPenaltyForgiveAfter = time.Hour
)

const penaltyFields fieldSet = "tolerance cooldown factor max forgive_after"

// penaltyNone is the value of a penalty field that opts out of the
// domain's default penalty.
const penaltyNone = "none"

// penalty decodes the penalty field f of the mapping ctx names. It
// returns the penalty, or nil for "none", and whether f decoded without
// errors.
func (b *domainBuilder) penalty(f *field, path, ctx string) (*algorithm.Penalty, bool) {
	name := fieldName(ctx, f)
	if f.val.Kind == yaml.ScalarNode && f.val.Value == penaltyNone {
		return nil, true
	}
	if f.val.Kind != yaml.MappingNode {
		b.errorf(f.val, path, "%s: want a mapping of tolerance, cooldown, factor, max and forgive_after, or %q, got %s",
			name, penaltyNone, describe(f.val))
		return nil, false
	}
	before := b.nerrs
	fs := b.fields(f.val, path, name, penaltyFields)
	if fs == nil {
		return nil, false
	}
	b.report(fs, path)
	p := &algorithm.Penalty{Factor: DefaultPenaltyFactor, ForgiveAfter: DefaultPenaltyForgiveAfter.Microseconds()}
	if tf := fs.get("tolerance"); tf != nil {
		if v, ok := b.uint32Field(tf, path, name); ok {
			if v > algorithm.MaxTolerance {
				b.errorf(tf.val, path, "%s.tolerance: at most %d, got %d", name, algorithm.MaxTolerance, v)
			}
			p.Tolerance = int64(v)
		}
	}
	if ff := fs.get("factor"); ff != nil {
		if v, ok := b.uint32Field(ff, path, name); ok {
			if v < 1 || v > algorithm.MaxFactor {
				b.errorf(ff.val, path, "%s.factor: want a whole number from 1 to %d, got %d", name, algorithm.MaxFactor, v)
			}
			p.Factor = int64(v)
		}
	}
	cf := fs.get("cooldown")
	if cf == nil {
		b.errorf(f.val, path, "%s: cooldown is required", name)
	} else {
		p.Cooldown, _ = b.penaltyDuration(cf, path, name)
	}
	p.Max = max(DefaultPenaltyMax.Microseconds(), p.Cooldown)
	if mf := fs.get("max"); mf != nil {
		if v, ok := b.penaltyDuration(mf, path, name); ok {
			p.Max = v
			if v < p.Cooldown {
				b.errorf(mf.val, path, "%s.max: %s is shorter than the cooldown, %s", name, formatMicros(v), formatMicros(p.Cooldown))
			}
		}
	}
	if ff := fs.get("forgive_after"); ff != nil {
		p.ForgiveAfter, _ = b.penaltyDuration(ff, path, name)
	}
	if b.nerrs != before || b.exhausted {
		return nil, false
	}
	return p, true
}

// penaltyDuration decodes a duration field of a penalty: from 1µs to
// algorithm.MaxCooldown, in µs.
func (b *domainBuilder) penaltyDuration(f *field, path, ctx string) (int64, bool) {
	d, err := time.Duration(0), error(nil)
	if f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!str" {
		d, err = time.ParseDuration(f.val.Value)
	}
	maxD := time.Duration(algorithm.MaxCooldown) * time.Microsecond
	if f.val.Kind != yaml.ScalarNode || f.val.ShortTag() != "!!str" || err != nil || d < time.Microsecond || d > maxD {
		b.errorf(f.val, path, "%s: want a duration from 1µs to %s such as 10s or 15m, got %s",
			fieldName(ctx, f), formatMicros(int64(maxD/time.Microsecond)), describe(f.val))
		return 0, false
	}
	return d.Microseconds(), true
}

// penaltyOf resolves the penalty of a counted limit from its penalty
// field, if any, and the domain's default.
func (b *domainBuilder) penaltyOf(fs fields, path, ctx string, l *Limit) {
	f := fs.get("penalty")
	if f == nil {
		if l.Charge == algorithm.ChargeAdmitted {
			l.Penalty = b.defaultPenalty
		}
		return
	}
	p, ok := b.penalty(f, path, ctx)
	if !ok {
		return
	}
	if p != nil && l.Charge == algorithm.ChargeAlways {
		b.errorf(f.key, path, "%s: a penalty cannot apply to a limit charged always: its hits are usage being reported, which a penalty neither blocks nor counts", ctx)
		return
	}
	l.Penalty = p
}

// formatMicros writes a duration of us µs the way configuration spells
// it, without zero minutes and seconds: "15m", "1h", "1h30m", "90ms".
func formatMicros(us int64) string {
	s := (time.Duration(us) * time.Microsecond).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// writePenalty writes p as the dump shows it.
func writePenalty(b dumpWriter, p *algorithm.Penalty) {
	fmt.Fprintf(b, "penalty {tolerance %d, cooldown %s, factor %d, max %s, forgive_after %s}",
		p.Tolerance, formatMicros(p.Cooldown), p.Factor, formatMicros(p.Max), formatMicros(p.ForgiveAfter))
}
