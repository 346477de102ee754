package override

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// NamePrefix starts the name of every limit an override sets, followed by
// the override's ID: Envoy's current_limit.name says "override:<id>".
const NamePrefix = "override:"

// Set is an immutable snapshot of live overrides, indexed for the
// limiter: Match finds the override of a descriptor in a map lookup and a
// scan of the overrides that share its first entry. It is safe for
// concurrent use.
type Set struct {
	all []Override // oldest first
	// byFirst holds, per domain and first entry, the overrides that begin
	// with it, longest first, then newest first.
	byFirst map[string]map[descriptor.Entry][]*Live
}

// Live is an override of a Set, with what applying it takes.
type Live struct {
	Override
	// Name is the name of the limits it sets: NamePrefix and the ID.
	Name string
	unit descriptor.Unit

	// limits caches the limits it makes of a rule's, by rule; n counts
	// them. At maxCached the cache starts again empty: a reload makes new
	// rules, so a long-lived override would otherwise fill it with rules
	// no request reaches any more, and allocate for every new one.
	limits sync.Map // *descriptor.Rule → []descriptor.Limit
	n      atomic.Int64
}

// maxCached bounds the rules whose overridden limits one Live caches.
const maxCached = 4096

// NewSet returns a Set of the overrides in list whose units parse; it
// does not judge expiry, which Match does at each call. It returns nil
// when list is empty, so that a limiter without overrides pays one nil
// check.
func NewSet(list []Override) *Set {
	if len(list) == 0 {
		return nil
	}
	s := &Set{byFirst: make(map[string]map[descriptor.Entry][]*Live)}
	for _, o := range list {
		if len(o.Entries) == 0 {
			continue
		}
		lv := &Live{Override: o, Name: NamePrefix + o.ID}
		if o.Limit != nil {
			u, err := descriptor.ParseUnit(o.Limit.Unit)
			if err != nil {
				continue // validated when created; another version wrote it
			}
			lv.unit = u
		}
		dom := s.byFirst[o.Domain]
		if dom == nil {
			dom = make(map[descriptor.Entry][]*Live)
			s.byFirst[o.Domain] = dom
		}
		dom[o.Entries[0]] = append(dom[o.Entries[0]], lv)
		s.all = append(s.all, o)
	}
	if len(s.all) == 0 {
		return nil
	}
	for _, dom := range s.byFirst {
		for _, lvs := range dom {
			slices.SortStableFunc(lvs, func(a, b *Live) int {
				if c := cmp.Compare(len(b.Entries), len(a.Entries)); c != 0 {
					return c
				}
				return b.CreatedAt.Compare(a.CreatedAt)
			})
		}
	}
	slices.SortStableFunc(s.all, func(a, b Override) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return s
}

// Len returns the number of overrides in s, expired ones included.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.all)
}

// All returns the overrides of s, oldest first, expired ones included.
// The slice is s's: callers must not modify it.
func (s *Set) All() []Override {
	if s == nil {
		return nil
	}
	return s.all
}

// Match returns the override of a descriptor of domain with entries at
// now: of the overrides of the domain that have not expired and whose
// entries are a prefix of entries (same keys and values, in order), the
// longest, and of equally long ones the newest. It returns nil when none
// applies. It does not allocate.
func (s *Set) Match(domain string, entries []descriptor.Entry, now time.Time) *Live {
	if s == nil || len(entries) == 0 {
		return nil
	}
	dom := s.byFirst[domain]
	if dom == nil {
		return nil
	}
	for _, lv := range dom[entries[0]] {
		if len(lv.Entries) <= len(entries) && slices.Equal(lv.Entries, entries[:len(lv.Entries)]) && now.Before(lv.ExpiresAt) {
			return lv
		}
	}
	return nil
}

// Limits returns the limits that replace limits, the limits a descriptor
// would be counted against, of the rule rule (nil when they are not a
// rule's own, as an Envoy override's): an absolute override's one limit,
// counted with the algorithm, burst, charge and precision of limits[0];
// or, for a multiplier, every limit with its requests_per_unit and burst
// multiplied and rounded down, requests_per_unit at least 1. Every limit
// is named lv.Name. With a rule the result is cached and shared: callers
// must not modify it.
func (lv *Live) Limits(rule *descriptor.Rule, limits []descriptor.Limit) []descriptor.Limit {
	if rule != nil {
		if v, ok := lv.limits.Load(rule); ok {
			return v.([]descriptor.Limit)
		}
	}
	out := lv.apply(limits)
	if rule != nil {
		if lv.n.Load() >= maxCached {
			lv.limits.Clear()
			lv.n.Store(0)
		}
		if v, loaded := lv.limits.LoadOrStore(rule, out); loaded {
			out = v.([]descriptor.Limit)
		} else {
			lv.n.Add(1)
		}
	}
	return out
}

func (lv *Live) apply(limits []descriptor.Limit) []descriptor.Limit {
	if len(limits) == 0 {
		return nil
	}
	if lv.Limit != nil {
		l := limits[0]
		l.Name = lv.Name
		l.Unit, l.UnitMultiplier = lv.unit, 1
		l.RequestsPerUnit = lv.Limit.RequestsPerUnit
		return []descriptor.Limit{l}
	}
	out := slices.Clone(limits)
	for i := range out {
		out[i].Name = lv.Name
		out[i].RequestsPerUnit = max(multiply(out[i].RequestsPerUnit, lv.Multiplier), 1)
		out[i].Burst = multiply(out[i].Burst, lv.Multiplier)
	}
	return out
}

// multiply returns n × m rounded down, within uint32.
func multiply(n uint32, m float64) uint32 {
	return uint32(min(math.Floor(float64(n)*m), math.MaxUint32))
}
