package top

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// DefaultLimit is the number of entries a Query with Limit 0 returns.
const DefaultLimit = 10

// Query asks for the busiest descriptor values.
type Query struct {
	// Domain, when not empty, keeps the rule identities of that domain.
	Domain string
	// Rule, when not empty, keeps the rule identities whose rule path or
	// limit name it is.
	Rule string
	// By is the count the entries are sorted by, descending.
	By By
	// Window is the span of time counted.
	Window Window
	// Limit is the most entries returned; 0 means DefaultLimit.
	Limit int
	// Local answers for this instance alone, even with Peers.
	Local bool
}

// matches reports whether q keeps the rule identity id.
func (q *Query) matches(id RuleID) bool {
	return (q.Domain == "" || q.Domain == id.Domain) && (q.Rule == "" || q.Rule == id.Rule || q.Rule == id.Limit)
}

// Entry is one descriptor value of one rule identity in an Answer.
//
// Requests and Rejected are upper bounds of the value's true counts:
// each true count lies between the count less its error and the count.
// An error is at most N/K, N the rule identity's total of that count in
// the window over every instance merged and K the capacity, and is
// often much less (zero for a value counted from the start of every
// interval).
type Entry struct {
	RuleID
	Descriptor []descriptor.Entry
	Requests   uint64
	Rejected   uint64
	// Error is the error of the count the query sorts by.
	Error uint64
	// RequestsError and RejectedError are each count's error.
	RequestsError, RejectedError uint64
}

// Answer is the answer to a Query.
type Answer struct {
	Window Window
	By     By
	// Instances is the number of instances whose summaries were merged:
	// 1 without peers.
	Instances int
	// Partial reports that the peers could not be read: the answer is
	// this instance's alone.
	Partial bool
	// Entries are sorted by the By count (its upper bound), descending,
	// then by its lower bound, then by rule identity and descriptor.
	Entries []Entry
}

// Top returns the busiest descriptor values of the rule identities q
// keeps, over q.Window, merged across the fleet when the Recorder has
// Peers. It returns an error wrapping ErrInvalidQuery for a query it
// cannot answer; peers that cannot be read make the answer Partial, not
// an error.
func (r *Recorder) Top(ctx context.Context, q Query) (*Answer, error) {
	if q.Window >= numWindows || q.By > ByRequests || q.Limit < 0 {
		return nil, fmt.Errorf("%w: window %d, by %d, limit %d", ErrInvalidQuery, q.Window, q.By, q.Limit)
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultLimit
	}
	m := r.gather(ctx, q.matches, q.Local)
	ans := &Answer{Window: q.Window, By: q.By, Instances: m.instances, Partial: m.partial, Entries: []Entry{}}
	type candidate struct {
		id       RuleID
		key      string
		req, rej *summary
	}
	var cands []candidate
	for _, mr := range m.rules {
		p := mr.windows[q.Window].pair
		by := p.rej
		if q.By == ByRequests {
			by = p.req
		}
		for _, e := range by.entries {
			cands = append(cands, candidate{id: mr.id, key: e.key, req: p.req, rej: p.rej})
		}
	}
	entries := make([]Entry, len(cands))
	los := make([]uint64, len(cands)) // the lower bound of the By count
	for i, c := range cands {
		reqLo, reqHi := c.req.bounds(c.key)
		rejLo, rejHi := c.rej.bounds(c.key)
		// A rejection is a request too. (Bounds that contradict each
		// other, which only a peer's bad data could give, are clamped.)
		rejHi, reqLo = min(rejHi, reqHi), min(max(reqLo, rejLo), reqHi)
		rejLo = min(rejLo, rejHi)
		e := Entry{RuleID: c.id, Requests: reqHi, Rejected: rejHi, RequestsError: reqHi - reqLo, RejectedError: rejHi - rejLo}
		e.Error, los[i] = e.RejectedError, rejLo
		if q.By == ByRequests {
			e.Error, los[i] = e.RequestsError, reqLo
		}
		entries[i] = e
	}
	order := make([]int, len(entries))
	for i := range order {
		order[i] = i
	}
	count := func(e *Entry) uint64 {
		if q.By == ByRequests {
			return e.Requests
		}
		return e.Rejected
	}
	slices.SortFunc(order, func(a, b int) int {
		ea, eb := &entries[a], &entries[b]
		if c := cmp.Compare(count(eb), count(ea)); c != 0 {
			return c
		}
		if c := cmp.Compare(los[b], los[a]); c != 0 {
			return c
		}
		if c := compareIDs(ea.RuleID, eb.RuleID); c != 0 {
			return c
		}
		return strings.Compare(cands[a].key, cands[b].key)
	})
	for _, i := range order[:min(limit, len(order))] {
		e := entries[i]
		var err error
		if e.Descriptor, err = decodeEntries(cands[i].key); err != nil {
			continue // checked when decoded or encoded here: not reached
		}
		ans.Entries = append(ans.Entries, e)
	}
	return ans, nil
}

// RulesQuery asks for the rates of rule identities.
type RulesQuery struct {
	// Domain and Rule filter as in Query.
	Domain, Rule string
	// Local answers for this instance alone, even with Peers.
	Local bool
}

// RuleStats are the rates of one rule identity and its hottest value.
// Rates are per second over the 1m and 5m windows, each instance's
// count divided by the span its window covered, summed over the
// instances.
type RuleStats struct {
	RuleID
	// RequestsPerUnit and Period are the limit's, zero for an override.
	RequestsPerUnit uint32
	Period          time.Duration
	// Decisions and Rejections are rates per second, weighted by hits.
	Decisions1m, Rejections1m float64
	Decisions5m, Rejections5m float64
	// Hottest is the value with the most hits in the 1m window, by its
	// lower bound; nil without traffic.
	Hottest []descriptor.Entry
	// HottestHits is that lower bound, scaled down to 60 s when the
	// window covers more (never up): hits the value
	// certainly had, per minute, however many other values there were.
	HottestHits float64
	// HottestRatio is HottestHits over what the limit allows in 60 s
	// (RequestsPerUnit × 60 s / Period): above 1, one value is pushing
	// past the limit's rate. Zero for an override.
	HottestRatio float64
}

// RulesAnswer is the answer to a RulesQuery.
type RulesAnswer struct {
	// Instances and Partial are as in Answer.
	Instances int
	Partial   bool
	// Rules are sorted by rule identity.
	Rules []RuleStats
}

// Rules returns the rates of the rule identities q keeps, merged across
// the fleet when the Recorder has Peers.
func (r *Recorder) Rules(ctx context.Context, q RulesQuery) *RulesAnswer {
	tq := Query{Domain: q.Domain, Rule: q.Rule}
	m := r.gather(ctx, tq.matches, q.Local)
	ans := &RulesAnswer{Instances: m.instances, Partial: m.partial, Rules: make([]RuleStats, 0, len(m.rules))}
	for _, mr := range m.rules {
		st := RuleStats{RuleID: mr.id, RequestsPerUnit: mr.rpu, Period: mr.period,
			Decisions1m: mr.rates[Minute].req, Rejections1m: mr.rates[Minute].rej,
			Decisions5m: mr.rates[FiveMinutes].req, Rejections5m: mr.rates[FiveMinutes].rej,
		}
		req := mr.windows[Minute].req
		var best *entry
		for i := range req.entries {
			e := &req.entries[i]
			if best == nil || e.lo > best.lo || (e.lo == best.lo && req.hi(e) > req.hi(best)) {
				best = e
			}
		}
		if span := mr.windows[Minute].span; best != nil && span > 0 {
			st.Hottest, _ = decodeEntries(best.key)
			// Scaled down when the window covers more than 60 s, never
			// up: a minute's hits are not guessed from its first seconds.
			span = max(span, time.Minute)
			st.HottestHits = float64(best.lo) * float64(time.Minute) / float64(span)
			if mr.rpu > 0 && mr.period > 0 {
				st.HottestRatio = float64(best.lo) * float64(mr.period) / (float64(mr.rpu) * float64(span))
			}
		}
		ans.Rules = append(ans.Rules, st)
	}
	return ans
}

// merged is the summaries of the instances merged, per rule identity.
type merged struct {
	instances int
	partial   bool
	rules     []*mergedRule // sorted by identity
}

type mergedRule struct {
	id      RuleID
	rpu     uint32
	period  time.Duration
	windows [numWindows]windowSnapshot // span: the longest of any instance
	rates   [numWindows]struct{ req, rej float64 }
	parts   [numWindows][]pair
}

// gather merges this instance's snapshot of the rule identities match
// keeps with the peers', unless local.
func (r *Recorder) gather(ctx context.Context, match func(RuleID) bool, local bool) *merged {
	snaps := []*Snapshot{r.snapshot(match)}
	m := &merged{}
	if r.peers != nil && !local {
		peers, err := r.peers.Peers(ctx)
		if err != nil {
			m.partial = true
			r.log.Warn("reading the other instances' summaries; answering for this one alone", "error", err)
		}
		for _, p := range peers {
			if p != nil && p.Instance != r.instance {
				snaps = append(snaps, p)
			}
		}
	}
	m.instances = len(snaps)
	byID := make(map[RuleID]*mergedRule)
	for _, s := range snaps {
		for i := range s.Rules {
			rs := &s.Rules[i]
			if !match(rs.ID) {
				continue
			}
			mr := byID[rs.ID]
			if mr == nil {
				mr = &mergedRule{id: rs.ID}
				byID[rs.ID] = mr
				m.rules = append(m.rules, mr)
			}
			if s == snaps[0] || mr.period == 0 {
				// This instance's limit wins: its rules are the newest
				// it knows.
				mr.rpu, mr.period = rs.RequestsPerUnit, rs.Period
			}
			for w := range rs.windows {
				ws := &rs.windows[w]
				mr.parts[w] = append(mr.parts[w], ws.pair)
				mr.windows[w].span = max(mr.windows[w].span, ws.span)
				if ws.span > 0 {
					// At least one slot: a young instance's first
					// hits are not a rate over its first milliseconds.
					sec := max(ws.span, slotLen).Seconds()
					mr.rates[w].req += float64(total(ws.req)) / sec
					mr.rates[w].rej += float64(total(ws.rej)) / sec
				}
			}
		}
	}
	for _, mr := range m.rules {
		for w := range mr.parts {
			if len(mr.parts[w]) == 1 {
				mr.windows[w].pair = mr.parts[w][0]
			} else {
				mr.windows[w].pair = mergePairs(r.k, mr.parts[w]...)
			}
			if mr.windows[w].req == nil {
				mr.windows[w].req = &summary{}
			}
			if mr.windows[w].rej == nil {
				mr.windows[w].rej = &summary{}
			}
			mr.parts[w] = nil
		}
	}
	slices.SortFunc(m.rules, func(a, b *mergedRule) int { return compareIDs(a.id, b.id) })
	return m
}

func total(s *summary) uint64 {
	if s == nil {
		return 0
	}
	return s.total
}
