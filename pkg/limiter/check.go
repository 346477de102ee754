package limiter

import (
	"context"
	"errors"
	"math"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// scratch holds the per-request working slices; Check takes one from a pool.
type scratch struct {
	descs    []descState
	hits     []store.Hit
	limits   []*descriptor.Limit // limits[i] is the limit of hits[i]
	verdicts []algorithm.Verdict
	entries  []store.Entry
	plain    []descriptor.Entry // the entries of marked descriptors, marker removed
	buf      []byte
	// The fallback's hits and verdicts, used only while the store fails.
	localHits     []store.Hit
	localVerdicts []algorithm.Verdict
}

// reset empties s for reuse. It leaves the old contents in place: clearing
// them costs more than it saves, and the next request overwrites them.
func (s *scratch) reset() {
	s.descs = s.descs[:0]
	s.hits = s.hits[:0]
	s.limits = s.limits[:0]
	s.verdicts = s.verdicts[:0]
	s.entries = s.entries[:0]
	s.plain = s.plain[:0]
	s.buf = s.buf[:0]
	s.localHits = s.localHits[:0]
}

// answer is a Response allocated together with room for the common case of
// one status and a handful of headers, so a typical answer costs one
// allocation.
type answer struct {
	resp     Response
	statuses [1]Status
	headers  [6]Header
}

// Check decides req. It returns an error wrapping ErrInvalidRequest for a
// malformed request or one beyond the bounds of Options, and the context's
// error when ctx ends before the store answers; a store failure is not an
// error but answers by the rules' failure modes, marked degraded.
func (l *Limiter) Check(ctx context.Context, req *Request) (*Response, error) {
	a := new(answer)
	resp := &a.resp
	resp.Statuses = a.statuses[:0]
	resp.Headers = a.headers[:0]
	if err := l.CheckInto(ctx, req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// CheckInto is Check writing its answer into resp, reusing the arrays of
// resp.Statuses and resp.Headers, so a caller that converts answers at once
// (such as the gRPC adapter) can pool Responses. Header values and Limits
// in resp stay valid after resp is reused; resp itself must not be used by
// anyone else meanwhile.
func (l *Limiter) CheckInto(ctx context.Context, req *Request, resp *Response) (err error) {
	var tr *checkTrace
	if l.tracer != nil {
		ctx, tr = l.startCheck(ctx, req)
		defer func() { tr.end(resp, err) }()
	}
	marked, err := l.bounds.validate(req)
	if err != nil {
		if errors.Is(err, ErrUntrusted) {
			l.metrics.untrusted.Add(ctx, 1)
		}
		return err
	}
	start := l.now()
	n := len(req.Descriptors)
	resp.Code = OK
	resp.Statuses = grow(resp.Statuses, n)
	resp.Headers = resp.Headers[:0]
	resp.Body = nil

	tree := l.tree()
	if tree == nil {
		l.metrics.decisions.Add(ctx, int64(n), l.metrics.noRules...)
		return ErrNoRules
	}
	dom := tree.Domain(req.Domain)
	if dom == nil {
		for i := range resp.Statuses {
			resp.Statuses[i] = Status{Code: OK}
		}
		l.metrics.decisions.Add(ctx, int64(n), l.metrics.unknownDomain...)
		if l.recorder != nil && !req.Unrecorded {
			l.recorder.Record(start, nil, req, resp)
		}
		l.metrics.latency.Record(ctx, l.since(start).Seconds())
		return nil
	}
	labels := l.labelsFor(tree)

	s := l.pool.Get().(*scratch)
	defer func() {
		s.reset()
		l.pool.Put(s)
	}()

	var set *override.Set
	if l.overrides != nil {
		set = l.overrides()
	}
	l.resolve(s, dom, req, marked, set, start)
	l.buildHits(s, dom, req)

	var storeErr error
	if len(s.hits) > 0 {
		s.verdicts = grow(s.verdicts, len(s.hits))
		storeErr = l.apply(ctx, s.hits, s.verdicts)
		if storeErr != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			l.storeFailed(ctx, req.Domain, storeErr)
			l.decideLocally(ctx, s)
		}
	}

	var f flags
	hardOver := false
	quotaSeen, quotaOver := 0, 0
	for i := range s.descs {
		st := &s.descs[i]
		out := &resp.Statuses[i]
		var result result
		var label *descriptor.Limit // the limit the metrics name, when not out.Limit
		switch st.kind {
		case kindUnmatched:
			*out = Status{Code: OK}
			result = resultUnmatched
		case kindReplaced:
			*out = Status{Code: OK}
			result = resultReplaced
		case kindUnlimited:
			*out = Status{Code: OK, Remaining: Unlimited}
			result = resultUnlimited
		case kindAllow:
			*out = Status{Code: OK, Remaining: Unlimited}
			result = resultAllowlist
			f |= flagAllow
		case kindDeny:
			if st.shadow {
				*out = Status{Code: OK}
				result = resultShadowDenylist
				break
			}
			*out = Status{Code: OverLimit}
			result = resultDenylist
			f |= flagDeny
			hardOver = true
		case kindCounted:
			var over bool
			switch {
			case storeErr == nil:
				*out, over = s.status(st)
			case st.local:
				*out, over = s.status(st)
				f |= flagDegraded
				label = out.Limit
				out.Limit = l.localLimit(out.Limit)
			default:
				*out = l.failureStatus(s, st, storeErr)
				over = out.Code == OverLimit
				f |= flagDegraded
			}
			switch {
			case !over:
				result = resultOK
			case st.shadow:
				out.Code = OK
				out.RetryAfter, out.Penalized, out.Never = 0, false, false
				result = resultShadowOverLimit
			default:
				result = resultOverLimit
				if !st.quota {
					hardOver = true
				}
				if out.Penalized {
					result = resultPenalized
					f |= flagPenalty
				}
			}
			if storeErr != nil && !st.local {
				result = resultDegraded
			} else if st.charged {
				l.countPastLimit(ctx, s, st, labels, req.Domain, dom)
			}
			if st.quota {
				quotaSeen++
				if over && !st.shadow {
					quotaOver++
				}
			}
		}
		if st.kind != kindUnmatched && st.kind != kindReplaced && !st.override {
			out.Rule = st.rule
		}
		if label == nil {
			label = out.Limit
		}
		ls := labels.set(req.Domain, dom, st, label)
		l.metrics.decisions.Add(ctx, 1, ls.opts[result]...)
		if l.observer != nil && st.kind == kindCounted {
			l.observe(s, req, i, labels, ls, dom, start, out.Code == OverLimit || result == resultShadowOverLimit)
		}
		if tr != nil {
			tr.record(l, st, label, result, storeErr != nil)
		}
	}
	if hardOver || (quotaSeen > 0 && quotaOver == quotaSeen) {
		resp.Code = OverLimit
		if !hardOver && storeErr == nil {
			// Every quota descriptor is over: the request is rejected, but
			// its soft hits could not block the batch.
			l.refund(ctx, s)
		}
	}
	l.addHeaders(s, resp, start, f)
	if l.recorder != nil && !req.Unrecorded {
		l.recorder.Record(start, dom, req, resp)
	}
	l.metrics.latency.Record(ctx, l.since(start).Seconds())
	return nil
}

// countPastLimit adds to tollgate_charged_past_limit_hits the costs of
// st's always-charged hits that the store rejected, and so charged past
// their limits.
func (l *Limiter) countPastLimit(ctx context.Context, s *scratch, st *descState, labels *labelCache, domain string, dom *descriptor.Domain) {
	for h := st.firstHit; h < st.firstHit+st.nHits; h++ {
		hit := &s.hits[h]
		if hit.Limit.Charge == algorithm.ChargeAlways && hit.Cost > 0 && !s.verdicts[h].Allowed {
			l.metrics.pastLimit.Add(ctx, hit.Cost, labels.set(domain, dom, st, s.limits[h]).pastLimit...)
		}
	}
}

// refund gives back what the admitted hits of a rejected request consumed,
// keeping the request all or nothing when only soft hits rejected it.
// Always-charged hits keep their cost. A failure is counted as a store
// error.
func (l *Limiter) refund(ctx context.Context, s *scratch) {
	n := 0
	for i := range s.hits {
		if s.verdicts[i].Allowed && s.hits[i].Cost > 0 && s.hits[i].Limit.Charge != algorithm.ChargeAlways {
			s.hits[n] = s.hits[i]
			s.hits[n].Cost = -s.hits[n].Cost
			s.hits[n].Soft = true
			n++
		}
	}
	if n == 0 {
		return
	}
	// The refund's verdicts are not reported; this path is rare enough to
	// allocate them.
	verdicts := make([]algorithm.Verdict, n)
	if err := l.apply(ctx, s.hits[:n], verdicts); err != nil {
		l.storeFailed(ctx, s.hits[0].Domain, err)
	}
}

// status returns the status of a counted descriptor from its verdicts and
// whether it is over the limit: the verdict of a rejected limit (the one
// with the longest wait) when any is rejected, else the one with the least
// remaining.
func (s *scratch) status(st *descState) (Status, bool) {
	best := st.firstHit
	for h := st.firstHit + 1; h < st.firstHit+st.nHits; h++ {
		v, b := &s.verdicts[h], &s.verdicts[best]
		switch {
		case !v.Allowed && b.Allowed:
			best = h
		case !v.Allowed && !b.Allowed && v.RetryAfter > b.RetryAfter:
			best = h
		case v.Allowed && b.Allowed && v.Remaining < b.Remaining:
			best = h
		}
	}
	v := &s.verdicts[best]
	out := Status{
		Code:       OK,
		Limit:      s.limits[best],
		Remaining:  clampUint32(v.Remaining),
		ResetAfter: max(v.ResetAfter, 0),
	}
	if !v.Allowed {
		// Remaining stays the verdict's: a hit of cost 5 is rejected with 3
		// left, and a smaller one would pass.
		out.Code = OverLimit
		out.Penalized = v.Penalized
		if !v.Penalized && s.hits[best].Cost > v.Limit {
			out.Never = true
		} else {
			out.RetryAfter = max(v.RetryAfter, 0)
		}
		return out, true
	}
	return out, false
}

// clampUint32 converts a remaining count for Envoy's uint32 field.
func clampUint32(v int64) uint32 {
	switch {
	case v < 0:
		return 0
	case v > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}

// grow returns s resized to n, reusing its array when large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
