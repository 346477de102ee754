package limiter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// ResetCounter is one counter that Reset cleared: the counter of Limit, of
// the rule Rule (nil for an Envoy override on a descriptor that matched no
// rule), for the request's descriptor at index Descriptor. Rule and Limit
// point into the immutable tree (or, for an override, into a value of
// their own): callers must not modify them.
type ResetCounter struct {
	Descriptor int
	Rule       *descriptor.Rule
	Limit      *descriptor.Limit
}

// ErrCannotReset reports a Reset on a limiter whose store cannot clear
// counters; it wraps store.ErrCannotClear.
var ErrCannotReset = fmt.Errorf("limiter: %w", store.ErrCannotClear)

// resetTimeout bounds a Reset's store call when Options.StoreTimeout is
// shorter: an operator's reset may wait longer than a decision.
const resetTimeout = 5 * time.Second

// Reset clears the counters that req's descriptors count against, so that
// each starts again empty: it resolves the descriptors as Check does
// (rules, replaces, Envoy and admin overrides alike) and asks the store to
// clear the counter of every limit that Check would count, and the
// fallback store of failure mode local too, when there is one. It returns
// one ResetCounter per counter cleared, in request order; descriptors that
// are not counted (no rule, unlimited, allow or deny lists, an unknown
// domain) clear nothing. It returns an error wrapping ErrInvalidRequest
// for a request Check would refuse, and the store's error (wrapping
// store.ErrUnavailable for an outage) when it cannot clear; the fallback's
// counters are cleared whatever the store answers. Options.OnReset is
// called with the counters after the store has cleared them.
func (l *Limiter) Reset(ctx context.Context, req *Request) ([]ResetCounter, error) {
	marked, err := l.bounds.validate(req)
	if err != nil {
		return nil, err
	}
	c, ok := l.store.(store.Clearer)
	if !ok {
		return nil, ErrCannotReset
	}
	dom := l.tree().Domain(req.Domain)
	if dom == nil {
		return nil, nil
	}
	s := l.pool.Get().(*scratch)
	defer func() {
		s.reset()
		l.pool.Put(s)
	}()
	var set *override.Set
	if l.overrides != nil {
		set = l.overrides()
	}
	l.resolve(s, dom, req, marked, set, l.now())
	l.buildHits(s, dom, req)
	out, counters := s.counters(nil, nil)
	if slices.ContainsFunc(s.descs, func(st descState) bool { return st.admin != nil }) {
		// An operator's absolute limit may count in another period than
		// the rule's own limits: clear those too, for when it ends.
		s.reset()
		l.resolve(s, dom, req, marked, nil, time.Time{})
		l.buildHits(s, dom, req)
		out, counters = s.counters(out, counters)
	}
	if len(counters) == 0 {
		return nil, nil
	}
	var errs []error
	if fc, ok := l.fallback.(store.Clearer); ok {
		if err := fc.Clear(ctx, counters); err != nil {
			errs = append(errs, fmt.Errorf("clearing the local fallback's counters: %w", err))
		}
	}
	cctx, cancel := context.WithTimeout(ctx, max(l.timeout, resetTimeout))
	defer cancel()
	if err := c.Clear(cctx, counters); err != nil {
		errs = append(errs, fmt.Errorf("clearing %d counters: %w", len(counters), err))
		return nil, errors.Join(errs...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if l.onReset != nil {
		l.onReset(ctx, counters)
	}
	return out, nil
}

// counters appends to out and counters each counter of s.hits that they
// do not hold yet, with a copy of its entries and cost 0.
func (s *scratch) counters(out []ResetCounter, counters []store.Hit) ([]ResetCounter, []store.Hit) {
	for i := range s.descs {
		st := &s.descs[i]
		if st.kind != kindCounted {
			continue
		}
		for h := st.firstHit; h < st.firstHit+st.nHits; h++ {
			hit := s.hits[h]
			if slices.ContainsFunc(counters, func(o store.Hit) bool { return sameCounter(&o, &hit) }) {
				continue
			}
			hit.Entries = slices.Clone(hit.Entries) // s.entries is reused
			hit.Cost = 0
			counters = append(counters, hit)
			out = append(out, ResetCounter{Descriptor: i, Rule: st.rule, Limit: s.limits[h]})
		}
	}
	return out, counters
}

// sameCounter reports whether a and b count against the same counter.
func sameCounter(a, b *store.Hit) bool {
	return a.Domain == b.Domain && a.Limit.Kind == b.Limit.Kind && a.Limit.Period == b.Limit.Period &&
		slices.Equal(a.Entries, b.Entries)
}
