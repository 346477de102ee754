package limiter

import (
	"math"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// Observer hears the descriptors the engine decides by a limit, such as
// the heavy-hitter summaries of package top. Options.Observer sets it;
// without one the engine pays nothing.
type Observer interface {
	// Rule returns what hears the decisions of one rule identity: the
	// domain, the rule's path and the limit's name as the
	// tollgate_decisions metric labels them ("(override)" for an
	// override), and the limit that decides (nil for an override). The
	// engine asks once per identity and rule set, and keeps the answer
	// while the rule set is live.
	Rule(domain, rule, limit string, lim *descriptor.Limit) RuleObserver
}

// RuleObserver hears the decisions of one rule identity.
type RuleObserver interface {
	// Observe is called once for every descriptor the identity decides,
	// with the time the request's decision began, the descriptor's
	// entries (without a charge marker), its hits (0 for a check), and
	// whether it was over the limit: answered OVER_LIMIT, by the limit,
	// a penalty or the failure mode closed, or answered OK by shadow
	// mode. Refunds are not observed. entries belong to the request:
	// Observe must copy what it keeps. It is called concurrently.
	Observe(now time.Time, entries []descriptor.Entry, hits uint64, rejected bool)
}

// observe tells the observer of st's rule identity about the decision
// of counted descriptor i of req. ls is the label set the decision was
// counted under.
func (l *Limiter) observe(s *scratch, req *Request, i int, labels *labelCache, ls *labelSet, dom *descriptor.Domain, now time.Time, rejected bool) {
	st := &s.descs[i]
	d := &req.Descriptors[i]
	if d.Refund {
		return
	}
	obs := ls.obs
	if obs == nil && st.nHits > 0 {
		// Answered by the failure mode open, which reports no limit:
		// the identity is the first limit's.
		obs = labels.set(req.Domain, dom, st, s.limits[st.firstHit]).obs
	}
	if obs == nil {
		return
	}
	hits := uint64(max(req.Hits, 1))
	if d.HasHits {
		hits = min(d.Hits, math.MaxInt64)
	}
	entries := d.Entries
	if st.always {
		entries = st.plain
	}
	obs.Observe(now, entries, hits, rejected)
}
