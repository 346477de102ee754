package descriptor

// This file decodes a descriptor's rate_limit or rate_limits into limits:
// envoyproxy/ratelimit's unit, requests_per_unit, unlimited, name and
// replaces, and tollgate's algorithm, burst, unit_multiplier, charge,
// precision and penalty (the last in penalty.go). It checks the limits of
// one descriptor against each other, such as two that would share a
// counter; the checks across descriptors are in parse.go.

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// limitSpec is one decoded rate_limit object.
type limitSpec struct {
	limit     Limit
	unlimited bool
	replaces  []string
	node      *yaml.Node
	ctx       string // "rate_limit" or "rate_limits[i]"
}

// limitSpecs decodes a descriptor's rate_limit or rate_limits and checks
// them against each other.
func (b *domainBuilder) limitSpecs(fs fields, path string) []limitSpec {
	one, many := fs.get("rate_limit"), fs.get("rate_limits")
	var specs []limitSpec
	switch {
	case one != nil && many != nil:
		later := one
		if many.key.Line > one.key.Line || (many.key.Line == one.key.Line && many.key.Column > one.key.Column) {
			later = many
		}
		b.errorf(later.key, path, "rate_limit and rate_limits cannot both be set; list every limit under rate_limits")
		return nil
	case one != nil:
		if s, ok := b.limit(one.val, one.key, path, "rate_limit"); ok {
			specs = append(specs, s)
		}
	case many != nil:
		seq := many.val
		if seq.Kind != yaml.SequenceNode {
			b.errorf(seq, path, "rate_limits: want a list, got %s", describe(seq))
			return nil
		}
		if len(seq.Content) == 0 {
			b.errorf(seq, path, "rate_limits: the list is empty")
			return nil
		}
		for i, item := range seq.Content {
			if s, ok := b.limit(item, item, path, fmt.Sprintf("rate_limits[%d]", i)); ok {
				specs = append(specs, s)
			}
		}
	}
	for i, s := range specs {
		if s.unlimited && len(specs) > 1 {
			b.errorf(s.node, path, "%s: an unlimited limit must be the only limit of a descriptor", s.ctx)
			continue
		}
		for _, prev := range specs[:i] {
			if !s.unlimited && !prev.unlimited && s.limit.Algorithm == prev.limit.Algorithm && s.limit.Period() == prev.limit.Period() {
				b.errorf(s.node, path, "%s: same algorithm (%s) and window (%s) as %s, so both would count in one counter",
					s.ctx, s.limit.Algorithm, s.limit.Period(), prev.ctx)
				break
			}
		}
	}
	return specs
}

// limit decodes one rate_limit object; at is where to report what it
// lacks. ok is false if it has errors.
func (b *domainBuilder) limit(n, at *yaml.Node, path, ctx string) (limitSpec, bool) {
	before := b.nerrs
	fs := b.fields(n, path, ctx, limitFields)
	if fs == nil {
		return limitSpec{}, false
	}
	b.report(fs, path)
	s := limitSpec{node: at, ctx: ctx}
	name, _ := b.str(fs.get("name"), path, ctx)
	s.limit.Name = name
	if name != "" {
		b.names[name] = true
	}
	s.unlimited = b.boolean(fs.get("unlimited"), path, ctx)
	if s.unlimited {
		for _, other := range [...]string{"unit", "requests_per_unit", "algorithm", "burst", "unit_multiplier", "charge", "precision", "penalty"} {
			if f := fs.get(other); f != nil {
				b.errorf(f.key, path, "%s: unlimited cannot be combined with %s", ctx, other)
			}
		}
	} else {
		b.counting(fs, at, path, ctx, &s.limit)
		b.tune(at, path, ctx, &s.limit)
		// The algorithms' own bounds, such as a token bucket's refill time,
		// catch what the checks above let through.
		if b.nerrs == before && !b.exhausted {
			if err := s.limit.Algo().Validate(); err != nil {
				b.errorf(at, path, "%s: %s", ctx, strings.ReplaceAll(err.Error(), "\n", "; "))
			}
		}
	}
	if f := fs.get("replaces"); f != nil {
		s.replaces = b.replaces(f, path, ctx, name)
	}
	return s, b.nerrs == before && !b.exhausted
}

// counting decodes the counting fields of a limited rate_limit object.
func (b *domainBuilder) counting(fs fields, n *yaml.Node, path, ctx string, l *Limit) {
	unitOK := false
	if f := fs.get("unit"); f == nil {
		b.errorf(n, path, "%s: unit is required", ctx)
	} else if s, ok := b.str(f, path, ctx); ok {
		if u, err := ParseUnit(s); err != nil {
			b.errorf(f.val, path, "%s: %v", ctx, err)
		} else {
			l.Unit, unitOK = u, true
		}
	} else if f.val.Kind == yaml.ScalarNode {
		b.errorf(f.val, path, "%s: unit is empty", ctx)
	}
	if f := fs.get("requests_per_unit"); f == nil {
		b.errorf(n, path, "%s: requests_per_unit is required", ctx)
	} else if v, ok := b.uint32Field(f, path, ctx); ok {
		l.RequestsPerUnit = v
	}

	l.Algorithm = b.algorithm
	source := b.algSource
	if f := fs.get("algorithm"); f != nil {
		if s, ok := b.str(f, path, ctx); ok {
			if k, err := algorithm.ParseKind(s); err != nil {
				b.errorf(f.val, path, "%s: %v", ctx, err)
			} else {
				l.Algorithm, source = k, ""
			}
		}
	}
	if f := fs.get("burst"); f != nil {
		if l.Algorithm != algorithm.TokenBucket {
			from := ""
			if source != "" {
				from = " (the algorithm comes from " + source + ")"
			}
			b.errorf(f.key, path, "%s: burst applies only to token_bucket, not %s%s", ctx, l.Algorithm, from)
		} else if v, ok := b.uint32Field(f, path, ctx); ok {
			l.Burst = v
		}
	} else if l.Algorithm == algorithm.TokenBucket && b.hasBurst {
		l.Burst = b.burst
	}

	l.Charge = b.charge
	if f := fs.get("charge"); f != nil {
		if s, ok := b.str(f, path, ctx); ok {
			if c, err := algorithm.ParseCharge(s); err != nil {
				b.errorf(f.val, path, "%s: %v", ctx, err)
			} else {
				l.Charge = c
			}
		}
	}

	b.penaltyOf(fs, path, ctx, l)

	// A default precision applies to the limits that can be leased; a
	// sliding_window_log limit stays strict. Asking for cached on one
	// explicitly is a contradiction.
	if l.Algorithm.Leasable() {
		l.Precision = b.precision
	}
	if f := fs.get("precision"); f != nil {
		if s, ok := b.str(f, path, ctx); ok {
			p, err := ParsePrecision(s)
			switch {
			case err != nil:
				b.errorf(f.val, path, "%s: %v", ctx, err)
			case p == PrecisionCached && !l.Algorithm.Leasable():
				from := ""
				if source != "" {
					from = " (the algorithm comes from " + source + ")"
				}
				b.errorf(f.key, path, "%s: precision cached does not apply to %s, which is never leased: its exactness is the reason to choose it%s",
					ctx, l.Algorithm, from)
			default:
				l.Precision = p
			}
		}
	}

	l.UnitMultiplier = 1
	if f := fs.get("unit_multiplier"); f != nil {
		if v, ok := b.uint32Field(f, path, ctx); ok {
			switch {
			case v == 0:
				b.errorf(f.val, path, "%s: unit_multiplier must be at least 1", ctx)
			case unitOK && time.Duration(v) > maxWindow/l.Unit.Duration():
				b.errorf(f.val, path, "%s: a window of %d %ss is longer than the algorithms support (%.1f years)",
					ctx, v, l.Unit, maxWindow.Hours()/24/365)
			default:
				l.UnitMultiplier = v
			}
		}
	}
	if l.Algorithm == algorithm.SlidingWindowLog && l.RequestsPerUnit > algorithm.MaxLogRequests {
		b.errorf(fs.get("requests_per_unit").val, path,
			"%s: sliding_window_log stores one entry per admitted hit, so requests_per_unit must be at most %d, got %d",
			ctx, algorithm.MaxLogRequests, l.RequestsPerUnit)
	}
}

// tune applies Options.Tune to l, the limit of the rule at path, when it
// names it, and checks the value as counting checks the file's.
func (b *domainBuilder) tune(n *yaml.Node, path, ctx string, l *Limit) {
	tn := b.opts.Tune
	if tn == nil || tn.Domain != b.d.name || tn.Rule != path || (tn.Limit != "" && tn.Limit != l.Name) {
		return
	}
	switch tn.Field {
	case TuneRequests:
		if l.Algorithm == algorithm.SlidingWindowLog && tn.Value > algorithm.MaxLogRequests {
			b.errorf(n, path, "%s: tuned requests_per_unit %d: sliding_window_log takes at most %d", ctx, tn.Value, algorithm.MaxLogRequests)
			return
		}
		l.RequestsPerUnit = tn.Value
	case TuneBurst:
		if l.Algorithm != algorithm.TokenBucket {
			b.errorf(n, path, "%s: tuned burst applies only to token_bucket, not %s", ctx, l.Algorithm)
			return
		}
		l.Burst = tn.Value
	}
}

// replaces decodes a replaces list: mappings of one field, name.
func (b *domainBuilder) replaces(f *field, path, ctx, own string) []string {
	if f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!null" {
		return nil
	}
	if f.val.Kind != yaml.SequenceNode {
		b.errorf(f.val, path, "%s.replaces: want a list, got %s", ctx, describe(f.val))
		return nil
	}
	var names []string
	for i, item := range f.val.Content {
		where := fmt.Sprintf("%s.replaces[%d]", ctx, i)
		fs := b.fields(item, path, where, replacesFields)
		if fs == nil {
			continue
		}
		b.report(fs, path)
		nameF := fs.get("name")
		name, _ := b.str(nameF, path, where)
		switch {
		case nameF == nil:
			b.errorf(b.resolve(item), path, "%s: name is required", where)
		case name == "":
			b.errorf(nameF.val, path, "%s: name is empty", where)
		case name == own:
			b.errorf(nameF.val, path, "%s: a limit cannot replace itself", where)
		default:
			names = append(names, name)
			b.refs = append(b.refs, replaceRef{name: name, node: nameF.val, path: path, ctx: where})
		}
	}
	return names
}
