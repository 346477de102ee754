package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// storeErrorLogInterval is the least time between two log lines about store
// errors; the errors in between are counted and reported with the next line.
const storeErrorLogInterval = 10 * time.Second

// closedRetryAfter is the Retry-After of a rule that fails closed when the
// store's error does not say when to retry: the circuit breaker has not
// opened, or is probing.
const closedRetryAfter = time.Second

// minStoreTime is the least time a store call is given. A caller with less
// left than the margin and this is answered by the failure modes without
// asking the store, so that tollgate's own backlog does not count as store
// failures (and open the circuit breaker) while the store is healthy.
const minStoreTime = time.Millisecond

// errNoTime is the store error of a call whose caller left no time for it.
var errNoTime = fmt.Errorf("%w: no time left for the store within the caller's deadline", store.ErrUnavailable)

// apply calls the store with a deadline: the earlier of the store timeout and
// the caller's deadline less the margin kept to answer in.
func (l *Limiter) apply(ctx context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	if l.timeout == 0 {
		return l.storeApply(ctx, l.store, "primary", hits, verdicts)
	}
	now := time.Now()
	deadline := now.Add(l.timeout)
	if d, ok := ctx.Deadline(); ok && d.Add(-l.margin).Before(deadline) {
		deadline = d.Add(-l.margin)
	}
	if deadline.Sub(now) < minStoreTime {
		return errNoTime
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return l.storeApply(ctx, l.store, "primary", hits, verdicts)
}

// failureMode returns how st is answered while the store fails.
func (l *Limiter) failureMode(st *descState) descriptor.FailureMode {
	if st.rule == nil {
		return l.defaultFail
	}
	return st.rule.FailureMode
}

// decideLocally decides the counted descriptors whose failure mode is
// local with the fallback store, each limit divided by the share, and
// marks them local. The fallback's batch is all-or-nothing like the
// store's. If the fallback fails too, they are answered as open.
func (l *Limiter) decideLocally(ctx context.Context, s *scratch) {
	if l.fallback == nil {
		return
	}
	// A descriptor failing closed rejects the request, which must then
	// charge nothing, so the local hits only check, except the
	// always-charged ones. (A deny list has already made them checks.)
	rejected := false
	for i := range s.descs {
		st := &s.descs[i]
		if st.kind == kindCounted && !st.shadow && !st.quota && l.failureMode(st) == descriptor.FailClosed {
			rejected = true
		}
	}
	for i := range s.descs {
		st := &s.descs[i]
		if st.kind != kindCounted || l.failureMode(st) != descriptor.FailLocal {
			continue
		}
		for _, h := range s.hits[st.firstHit : st.firstHit+st.nHits] {
			h.Limit.Requests = shareOf(h.Limit.Requests, l.share)
			h.Limit.Burst = shareOf(h.Limit.Burst, l.share)
			if rejected && h.Limit.Charge != algorithm.ChargeAlways {
				h.Cost = min(h.Cost, 0)
			}
			s.localHits = append(s.localHits, h)
		}
	}
	if len(s.localHits) == 0 {
		return
	}
	s.localVerdicts = grow(s.localVerdicts, len(s.localHits))
	if err := l.storeApply(ctx, l.fallback, "fallback", s.localHits, s.localVerdicts); err != nil {
		l.log.LogAttrs(ctx, slog.LevelError, "local fallback failed; answering as failure mode open", slog.Any("error", err))
		return
	}
	n := 0
	for i := range s.descs {
		st := &s.descs[i]
		if st.kind != kindCounted || l.failureMode(st) != descriptor.FailLocal {
			continue
		}
		n += copy(s.verdicts[st.firstHit:st.firstHit+st.nHits], s.localVerdicts[n:])
		st.local = true
	}
}

// localLimit returns the share of lim the fallback enforces, which a local
// answer reports. (An outage is rare enough to allocate; the metric labels
// keep using lim, so that they do not multiply.)
func (l *Limiter) localLimit(lim *descriptor.Limit) *descriptor.Limit {
	if lim == nil {
		return nil
	}
	local := *lim
	local.RequestsPerUnit = uint32(shareOf(int64(lim.RequestsPerUnit), l.share))
	local.Burst = uint32(shareOf(int64(lim.Burst), l.share))
	return &local
}

// shareOf is one instance's share of n: n / share, but at least 1 unless n
// is 0, so a share never turns a limit into a block.
func shareOf(n, share int64) int64 {
	if n == 0 {
		return 0
	}
	return max(n/share, 1)
}

// failureStatus answers a counted descriptor whose store could not decide
// and which the fallback did not decide. Failure mode closed rejects it,
// with a Retry-After of the wait the store's error names (a
// store.RetryAfterError, such as an open circuit breaker's) or else
// closedRetryAfter; open (and local without a working fallback) admits it,
// with no current limit and no invented remaining.
func (l *Limiter) failureStatus(s *scratch, st *descState, err error) Status {
	if l.failureMode(st) != descriptor.FailClosed {
		return Status{Code: OK}
	}
	out := Status{Code: OverLimit, RetryAfter: closedRetryAfter}
	if st.nHits > 0 {
		out.Limit = s.limits[st.firstHit]
	}
	if r, ok := errors.AsType[store.RetryAfterError](err); ok && r.RetryAfter() > 0 {
		out.RetryAfter = r.RetryAfter()
	}
	out.ResetAfter = out.RetryAfter
	return out
}

// storeFailed counts a store error and logs it, at most once per
// storeErrorLogInterval.
func (l *Limiter) storeFailed(ctx context.Context, domain string, err error) {
	l.metrics.storeErrors.Add(ctx, 1)
	now := l.now().UnixNano()
	last := l.lastErrLog.Load()
	if now-last < int64(storeErrorLogInterval) || !l.lastErrLog.CompareAndSwap(last, now) {
		l.errsQuiet.Add(1)
		return
	}
	l.log.LogAttrs(ctx, slog.LevelError, "store failed; answering by failure modes",
		slog.String("domain", domain),
		slog.Any("error", err),
		slog.Int64("suppressed", l.errsQuiet.Swap(0)))
}
