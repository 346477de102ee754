package limiter

import (
	"context"
	"math"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// kind is how a descriptor is decided.
type kind uint8

const (
	kindUnmatched kind = iota // no rule, or a rule without limits: OK, no limit
	kindUnlimited             // unlimited rule: OK, not counted
	kindAllow                 // allow list: OK, not counted
	kindDeny                  // deny list: OVER_LIMIT, not counted
	kindCounted               // one hit per limit
	kindReplaced              // every limit replaced by another descriptor's rule
)

// descState is the engine's working state for one descriptor.
type descState struct {
	kind     kind
	rule     *descriptor.Rule
	always   bool               // a ChargeKey entry charges every hit always
	plain    []descriptor.Entry // when always, the entries without ChargeKey
	charged  bool               // some hit is charged always
	limits   []descriptor.Limit // the rule's limits, or the one override
	override bool
	// admin is the operator's override that replaced limits, or nil.
	admin    *override.Live
	shadow   bool
	quota    bool
	firstHit int // index of the descriptor's first hit
	nHits    int
	local    bool // decided by the fallback store
}

// resolve matches every descriptor of req to its rule and fills s.descs.
// marked says whether any descriptor carries a ChargeKey entry. The
// overrides of set that apply at now replace the limits of counted
// descriptors.
func (l *Limiter) resolve(s *scratch, dom *descriptor.Domain, req *Request, marked bool, set *override.Set, now time.Time) {
	s.descs = grow(s.descs, len(req.Descriptors))
	if marked {
		// Room for every entry at once, so that the slices of s.plain
		// taken below are never moved by a later append.
		n := 0
		for i := range req.Descriptors {
			n += len(req.Descriptors[i].Entries)
		}
		if cap(s.plain) < n {
			s.plain = make([]descriptor.Entry, 0, n)
		}
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		st := &s.descs[i]
		*st = descState{}
		entries := d.Entries
		if marked {
			if st.plain, st.always = s.unmark(d.Entries); st.always {
				entries = st.plain
			}
		}
		rule := dom.Match(entries)
		st.rule = rule
		switch {
		case rule != nil && rule.Action == descriptor.ActionDeny:
			st.kind = kindDeny
			st.shadow = l.shadow || rule.ShadowMode
		case rule != nil && rule.Action == descriptor.ActionAllow:
			st.kind = kindAllow
		case l.envoyLimit(rule, d.Override, st):
			// Like envoyproxy/ratelimit, an override applies whether or not
			// a rule matches, replaces an unlimited rule's exemption, and
			// ignores the rule's shadow and quota mode; envoyLimit set
			// st.limits.
			st.kind = kindCounted
			st.override = true
			st.shadow = l.shadow
		case rule == nil:
			st.kind = kindUnmatched
		case rule.Unlimited:
			st.kind = kindUnlimited
		case len(rule.Limits) == 0:
			st.kind = kindUnmatched
		default:
			st.kind = kindCounted
			st.limits = rule.Limits
			st.shadow = l.shadow || rule.ShadowMode
			st.quota = rule.QuotaMode
		}
		if set != nil && st.kind == kindCounted {
			if lv := set.Match(req.Domain, entries, now); lv != nil {
				// An Envoy override's limits are its own: nothing to cache
				// them by.
				by := rule
				if st.override {
					by = nil
				}
				st.limits, st.admin = lv.Limits(by, st.limits), lv
			}
		}
	}
}

// unmark returns entries without their ChargeKey entries, copied into
// s.plain, and true; or nil and false when entries have none.
// bounds.validate has checked their values.
func (s *scratch) unmark(entries []descriptor.Entry) ([]descriptor.Entry, bool) {
	at := -1
	for j := range entries {
		if entries[j].Key == ChargeKey {
			at = j
			break
		}
	}
	if at < 0 {
		return nil, false
	}
	first := len(s.plain)
	s.plain = append(s.plain, entries[:at]...)
	for _, e := range entries[at+1:] {
		if e.Key != ChargeKey {
			s.plain = append(s.plain, e)
		}
	}
	return s.plain[first:len(s.plain):len(s.plain)], true
}

// replaced reports whether lim, a limit of rule, is replaced: whether its
// name appears in the replaces list of another rule matched in the same
// request. As in envoyproxy/ratelimit the replacing rule may itself be
// unlimited, a list rule or replaced, but not one answered by an Envoy
// override, which has no replaces.
func (s *scratch) replaced(rule *descriptor.Rule, lim *descriptor.Limit) bool {
	if lim.Name == "" {
		return false
	}
	for i := range s.descs {
		other := s.descs[i].rule
		if other == nil || other == rule || s.descs[i].override {
			continue
		}
		for _, name := range other.Replaces {
			if name == lim.Name {
				return true
			}
		}
	}
	return false
}

// replacedAt reports whether st's limit j is replaced (see replaced): by
// the name of the rule's own limit j when an operator's multiplier renamed
// it; an operator's absolute limit, like an Envoy override, never is.
func (s *scratch) replacedAt(st *descState, j int) bool {
	switch {
	case st.admin == nil:
		return s.replaced(st.rule, &st.limits[j])
	case st.admin.Limit != nil:
		return false
	}
	return s.replaced(st.rule, &st.rule.Limits[j])
}

// buildHits appends one hit per applicable limit of every counted
// descriptor to s.hits. The hits of a descriptor marked with ChargeKey are
// charged always, whatever their limits say.
func (l *Limiter) buildHits(s *scratch, dom *descriptor.Domain, req *Request) {
	// A deny list rejects the request whatever the counts, so the other
	// descriptors' hits only check, except the always-charged ones.
	anyReplaces, denied := false, false
	for i := range s.descs {
		st := &s.descs[i]
		if st.rule != nil && len(st.rule.Replaces) > 0 {
			anyReplaces = true
		}
		if st.kind == kindDeny && !st.shadow {
			denied = true
		}
	}
	shardBy := dom.ShardBy()
	for i := range s.descs {
		st := &s.descs[i]
		if st.kind != kindCounted {
			continue
		}
		d := &req.Descriptors[i]

		// The counted entries: the request's, with the rule's shared
		// pattern in place of the value where the rule sets one. An
		// override counts the request's own entries.
		first := len(s.entries)
		plain := d.Entries
		if st.always {
			plain = st.plain
		}
		for j, e := range plain {
			v := e.Value
			if !st.override && st.rule != nil && j < len(st.rule.Shared) && st.rule.Shared[j] != "" {
				v = st.rule.Shared[j]
			}
			s.entries = append(s.entries, store.Entry{Key: e.Key, Value: v})
		}
		entries := s.entries[first:len(s.entries):len(s.entries)]
		shard := entries[0].Value
		if shardBy != "" {
			for _, e := range entries {
				if e.Key == shardBy {
					shard = e.Value
					break
				}
			}
		}

		cost := int64(max(req.Hits, 1))
		if d.HasHits {
			cost = int64(min(d.Hits, math.MaxInt64))
		}
		if d.Refund {
			cost = -cost
		}

		st.firstHit = len(s.hits)
		for j := range st.limits {
			lim := &st.limits[j]
			if anyReplaces && !st.override && s.replacedAt(st, j) {
				continue
			}
			s.hits = append(s.hits, store.Hit{
				Domain:  req.Domain,
				Entries: entries,
				Shard:   shard,
				Limit:   lim.Algo(),
				Cost:    cost,
				Soft:    st.shadow || st.quota,
				Cached:  lim.Precision == descriptor.PrecisionCached && lim.Algorithm.Leasable(),
				Penalty: lim.Penalty,
			})
			if h := &s.hits[len(s.hits)-1]; st.always || h.Limit.Charge == algorithm.ChargeAlways {
				h.Limit.Charge = algorithm.ChargeAlways
				st.charged = true
			} else if denied {
				h.Cost = min(h.Cost, 0)
			}
			s.limits = append(s.limits, lim)
		}
		st.nHits = len(s.hits) - st.firstHit
		if st.nHits == 0 {
			st.kind = kindReplaced
		}
	}
}

// envoyLimit reports whether o, Envoy's per-descriptor limit override,
// decides the descriptor, and then sets st.limits to it: the rule's
// algorithm still counts it, with the rule's charge and precision. An
// override is nil, or one that gives a limit the algorithms cannot take
// (a sliding-window log past its bound, a bucket that refills too slowly)
// is not honoured: the rule's own limits decide, and the case is counted
// and logged once.
func (l *Limiter) envoyLimit(rule *descriptor.Rule, o *Override, st *descState) bool {
	if o == nil {
		return false
	}
	algo, charge, precision := l.defaultAlgo, l.defaultCharge, descriptor.PrecisionStrict
	if rule != nil && len(rule.Limits) > 0 {
		if rule.Limits[0].Algorithm != 0 {
			algo = rule.Limits[0].Algorithm
		}
		charge = rule.Limits[0].Charge
		precision = rule.Limits[0].Precision
	}
	if st.always {
		charge = algorithm.ChargeAlways
	}
	lim := descriptor.Limit{
		Unit:            o.Unit,
		UnitMultiplier:  max(o.UnitMultiplier, 1),
		RequestsPerUnit: o.RequestsPerUnit,
		Algorithm:       algo,
		Charge:          charge,
		Precision:       precision,
	}
	if err := lim.Algo().Validate(); err != nil {
		l.metrics.envoyIgnored.Add(context.Background(), 1)
		if l.envoyNoted.CompareAndSwap(false, true) {
			path := ""
			if rule != nil {
				path = rule.Path
			}
			l.log.Warn("an Envoy limit override the algorithms cannot take is ignored; the rule's own limits decide (logged once)",
				"rule", path, "error", err)
		}
		return false
	}
	// The override's Status.Limit points into this slice, so it outlives
	// the pooled scratch.
	st.limits = []descriptor.Limit{lim}
	return true
}
