package cached

import (
	"math"
	"slices"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// counter is this instance's view of one shared counter: the grants it
// holds, what the counter said at the last grant, and the local demand.
// Its fields are guarded by its shard's lock.
type counter struct {
	key     uint64
	domain  string
	entries []store.Entry
	shard   string
	limit   algorithm.Limit // as the latest hit gave it

	// grants are the leases held, spent in order; a grant with no Hits
	// is empty.
	grants [2]grant
	seq    uint64
	// last is the counter's verdict at the last grant, made at lastAt;
	// lastHits is that grant's size.
	last     algorithm.Verdict
	lastAt   int64
	lastHits int64
	// left is what the counter held for everyone after the last grant.
	left int64
	// overUntil is until when hits are rejected here, without asking
	// the counter: at most retryAt, when the counter itself said a hit
	// may pass, and at most one RenewInterval after a refusal, since
	// others may give back what they hold (see markOver).
	overUntil, retryAt int64
	// renewing is the reservation in flight, if any.
	renewing *renewal
	queued   bool
	gone     bool
	// cleared marks a counter forgotten because the shared counter was
	// cleared: what it held is never given back, to a counter that no
	// longer holds its charge.
	cleared bool

	// used is the last hit's time; rateAt starts the current demand
	// interval, whose hits are rateCur, after ratePrev in the previous.
	used              int64
	rateAt            int64
	rateCur, ratePrev int64
	// gap is the average time between this counter's hits here, in µs
	// (halved towards each new gap); 0 until its second hit.
	gap int64
}

// grant is a lease held and how much of it is spent.
type grant struct {
	lease algorithm.Lease
	spent int64
	seq   uint64
}

func newCounter(h *store.Hit, key uint64) *counter {
	return &counter{
		key:     key,
		domain:  h.Domain,
		entries: slices.Clone(h.Entries),
		shard:   h.Shard,
		limit:   h.Limit,
		left:    h.Limit.Capacity(),
	}
}

// identity returns c's counter as a Hit of cost 0.
func (c *counter) identity() store.Hit {
	return store.Hit{Domain: c.domain, Entries: c.entries, Shard: c.shard, Limit: c.limit}
}

// touch records a hit at now for the demand estimate.
func (c *counter) touch(h *store.Hit, now, interval int64) {
	c.limit = h.Limit
	if c.used != 0 {
		g := max(1, now-c.used)
		if c.gap != 0 {
			g = (c.gap + g) / 2
		}
		c.gap = g
	}
	c.used = now
	if d := now - c.rateAt; d >= interval {
		c.ratePrev = c.rateCur
		if d >= 2*interval {
			c.ratePrev = 0
		}
		c.rateCur, c.rateAt = 0, now
	}
	c.rateCur += max(h.Cost, 1)
}

// room returns the unspent hits held.
func (c *counter) room() int64 {
	return c.grants[0].lease.Hits - c.grants[0].spent + c.grants[1].lease.Hits - c.grants[1].spent
}

// The outcomes of spend.
const (
	spendLocal  = iota // decided from the lease
	spendOver          // rejected: the counter is known to be over
	spendStrict        // for the inner store, d.strict set
	spendEmpty         // the lease lacks room: reserve, then try again
)

// spend decides h from c's grants at now.
func (c *counter) spend(s *Store, h *store.Hit, d *decision, v *algorithm.Verdict, now int64) int {
	c.expire(s, now)
	room := c.room()
	d.c = c
	switch {
	case h.Cost == 0:
		// A check: room for one more hit passes; otherwise the counter
		// alone knows (an always-charged check passes at the limit).
		if room >= 1 {
			*v = c.status(now)
			return spendLocal
		}
		if c.overUntil > now && h.Limit.Charge == algorithm.ChargeAdmitted {
			*v = c.over(now)
			return spendOver
		}
		d.inner, d.strict = true, 0
		return spendStrict
	case h.Limit.Charge == algorithm.ChargeAlways:
		// What the lease holds is charged here; the rest goes to the
		// counter at once, never swallowed.
		take := min(room, h.Cost)
		c.take(d, take)
		d.always = true
		if take == h.Cost {
			*v = c.status(now)
			return spendLocal
		}
		d.inner, d.strict = true, h.Cost-take
		return spendStrict
	case room >= h.Cost:
		c.take(d, h.Cost)
		*v = c.status(now)
		return spendLocal
	case c.overUntil > now:
		*v = c.over(now)
		return spendOver
	case c.leftAt(now) < strictBelow || (c.expected(s, now) < 2 && c.freeLease(s) < 2):
		// Near the limit a lease would be a single hit held while others
		// starve, and for a counter whose hits are too sparse to spend
		// one, it would cost a reservation and a return where one strict
		// call does (unless it is free: see freeLease): decide strictly,
		// as the shared counter would.
		d.inner, d.strict, d.probe = true, h.Cost, true
		return spendStrict
	}
	return spendEmpty
}

// freeLease returns how many tokens a lease of c's bucket may hold at no
// cost beyond the call that reserves it: as many as refill within one
// RenewInterval, while the bucket is far from its limit, are never given
// back (see owed), so a lease of them costs what a strict decision does,
// however few of them are spent. 0 for a window, or a bucket near its
// limit.
func (c *counter) freeLease(s *Store) int64 {
	l := c.limit
	if l.Kind != algorithm.TokenBucket || c.left < aheadBelow || l.Period <= 0 {
		return 0
	}
	return min(c.left/shareDivisor, s.interval*l.Requests/l.Period)
}

// idleAfter returns how long c may go without a hit before it is
// forgotten: IdleAfter, or four of its average gaps; and while it holds
// no lease, or none worth a return, as long as a lease would live (a
// window, a bucket lease's lifetime; at most maxIdle), so that a counter
// seen a few times in that span learns its gap and leases for the rest,
// or spends what it holds.
func (c *counter) idleAfter(s *Store) int64 {
	d := max(s.idle, 4*c.gap)
	if c.room() == 0 || !c.owes(s, c.used) {
		life := c.limit.Period
		if c.limit.Kind == algorithm.TokenBucket {
			life = c.lifetime(s).Microseconds()
		}
		d = max(d, min(life, maxIdle.Microseconds()))
	}
	return d
}

// horizon returns how long a lease granted at now may be spent, in µs:
// until its window ends, or a token bucket's lifetime.
func (c *counter) horizon(s *Store, now int64) int64 {
	if c.limit.Kind == algorithm.TokenBucket {
		return c.lifetime(s).Microseconds()
	}
	return c.limit.Period - now%c.limit.Period
}

// lifetime returns how long a token-bucket lease of c may live:
// Lifetime while the bucket held half its capacity or less at the last
// answer, growing with what it held above that to MaxLifetime for a full
// bucket. A bucket far from empty can lend for long without anyone
// noticing: its unspent leases, each at most a 64th of what was left,
// are all the fleet can admit beyond the strict bucket.
func (c *counter) lifetime(s *Store) time.Duration {
	l := c.limit
	if l.Requests <= 0 || l.Period <= 0 {
		return s.lifetime
	}
	// What a full bucket reports left: above one token per µs, its
	// credit in µs (see algorithm's token bucket).
	full := float64(l.Capacity()) * min(1, float64(l.Period)/float64(l.Requests))
	over := 2*float64(c.left) - full // above half, doubled
	if over <= 0 {
		return s.lifetime
	}
	return s.lifetime + time.Duration(float64(s.longest-s.lifetime)*min(1, over/full))
}

// expected returns the hits this instance is expected to see on c within
// a lease's horizon from now, the hit at hand included: from the average
// gap between its hits, or its recent demand, whichever is more; 1 for a
// counter seen once.
func (c *counter) expected(s *Store, now int64) int64 {
	h := c.horizon(s, now)
	n := int64(1)
	if c.gap > 0 {
		n = max(n, h/c.gap)
	}
	if c.ratePrev > 0 {
		// A steady demand over the last whole interval.
		n = max(n, c.ratePrev*h/s.interval)
	}
	return n
}

// take spends n hits from the grants in order, recording them in d.
func (c *counter) take(d *decision, n int64) {
	for i := range c.grants {
		g := &c.grants[i]
		k := min(n, g.lease.Hits-g.spent)
		if k <= 0 {
			continue
		}
		g.spent += k
		n -= k
		d.parts[d.nparts] = part{seq: g.seq, n: k, lease: g.lease}
		d.nparts++
	}
}

// unspend gives back hits taken from a grant still held, and reports
// whether it was.
func (c *counter) unspend(p part) bool {
	for i := range c.grants {
		if g := &c.grants[i]; g.lease.Hits > 0 && g.seq == p.seq {
			g.spent -= p.n
			return true
		}
	}
	return false
}

// status is the verdict of an admitted hit: what the counter held for
// everyone at the last grant plus what this instance holds unspent, and
// the reset counted down from the grant.
func (c *counter) status(now int64) algorithm.Verdict {
	return algorithm.Verdict{
		Allowed:    true,
		Limit:      c.last.Limit,
		Remaining:  c.last.Remaining + c.room(),
		ResetAfter: countdown(c.last.ResetAfter, now-c.lastAt),
	}
}

// over is the verdict of a hit rejected because the counter granted
// nothing: the counter's own, counted down.
func (c *counter) over(now int64) algorithm.Verdict {
	return algorithm.Verdict{
		Limit:      c.last.Limit,
		Remaining:  c.room(),
		ResetAfter: countdown(c.last.ResetAfter, now-c.lastAt),
		RetryAfter: time.Duration(max(c.overUntil, c.retryAt)-now) * time.Microsecond,
	}
}

func countdown(d time.Duration, elapsed int64) time.Duration {
	return max(0, d-time.Duration(elapsed)*time.Microsecond)
}

// request is the reservation c asks for: the demand expected until its
// window ends, or over a bucket lease's life when it is extended, and at
// least one RenewInterval of its recent demand (of what is left of a
// window, if less); at least need, at most the counter's remainder at the
// last grant over shareDivisor (but at least one).
func (c *counter) request(s *Store, need int64) store.LeaseRequest {
	now := s.now()
	left := c.leftAt(now)
	want := max(1, c.rateCur, c.ratePrev)
	switch {
	case c.limit.Kind != algorithm.TokenBucket:
		// What is unspent when the window ends is lost to the fleet
		// until then, and weighs on the next sliding window.
		if rest := c.limit.Period - now%c.limit.Period; rest < s.interval {
			want = (want*rest + s.interval - 1) / s.interval
		}
		// Far from the limit, the lease covers the demand expected until
		// the window ends: a counter seen a few times a window reserves
		// once a window.
		want = max(want, c.expected(s, now))
	case c.lifetime(s) > s.lifetime:
		// A bucket far from empty lends for longer: the demand expected
		// over the lease's life, and what it lends for free.
		want = max(want, c.expected(s, now), c.freeLease(s))
	default:
		want = max(want, c.freeLease(s))
	}
	want = min(want, max(1, left/shareDivisor))
	want = max(want, need)
	lifetime := c.lifetime(s)
	if c.limit.Kind != algorithm.TokenBucket {
		lifetime = time.Duration(c.limit.Period) * time.Microsecond // the window ends it
	}
	return store.LeaseRequest{Counter: c.identity(), Want: want, Lifetime: lifetime}
}

// leftAt is what the counter held for everyone at the last answer. Once
// a new window has started since, a fixed window holds its whole limit
// again, but a sliding-window counter only what the previous window's
// weight at now leaves of it, the previous window taken to hold what the
// last answer had used.
func (c *counter) leftAt(now int64) int64 {
	l := c.limit
	if l.Kind == algorithm.TokenBucket {
		return c.left
	}
	last, cur := c.lastAt/l.Period, now/l.Period
	switch {
	case last == cur:
		return c.left
	case l.Kind == algorithm.SlidingWindowCounter && cur == last+1:
		used := float64(max(0, l.Capacity()-c.left))
		weight := float64(l.Period-now%l.Period) / float64(l.Period)
		return l.Capacity() - int64(math.Ceil(used*weight))
	}
	return l.Capacity()
}

// strictAnswer takes in the inner store's verdict v on a hit of cost
// decided strictly at now because the counter was near its limit. A
// rejection marks the counter over until its RetryAfter, for at most
// most µs.
func (c *counter) strictAnswer(v algorithm.Verdict, cost, now, most int64) {
	c.last, c.lastAt, c.lastHits, c.left = v, now, 0, v.Remaining
	if !v.Allowed && v.RetryAfter > 0 && cost <= 1 {
		c.markOver(now, v.RetryAfter.Microseconds(), most)
	} else if v.Allowed && cost >= 1 {
		c.emptied(v, now, math.MaxInt64)
	}
}

// markOver marks the counter over from now until retry µs later, when it
// said a hit may pass, asking it again after most µs at the latest.
func (c *counter) markOver(now, retry, most int64) {
	c.retryAt = now + retry
	c.overUntil = now + min(retry, most)
}

// emptied marks a token bucket that an admission answered at now left
// without a whole token as over until its next token, for at most most
// µs: a hit before then would be rejected by the shared bucket too, so it
// is rejected here without a round trip. now is when the call was sent,
// no later than the bucket's answer, so the mark ends no later than the
// next token.
func (c *counter) emptied(v algorithm.Verdict, now, most int64) {
	l := c.limit
	if l.Kind != algorithm.TokenBucket || l.Charge != algorithm.ChargeAdmitted || v.Remaining > 0 || l.Requests > l.Period {
		return
	}
	// The answer's ResetAfter is the time until the bucket is full: its
	// state as of now, from which a check tells the wait for one token.
	_, chk := algorithm.Apply(l, algorithm.State{T: now + v.ResetAfter.Microseconds()}, now, 0)
	if !chk.Allowed && chk.RetryAfter > 0 {
		c.markOver(now, chk.RetryAfter.Microseconds(), most)
	}
}

// install takes in a lease reserved at at. A grant of nothing marks the
// counter over until its RetryAfter; a grant to a forgotten counter is
// given back.
func (c *counter) install(s *Store, at int64, lease algorithm.Lease) {
	c.last, c.lastAt, c.lastHits, c.left = lease.Verdict, at, lease.Hits, lease.Verdict.Remaining
	if lease.Hits == 0 {
		// Others may hold unspent leases they will not spend: ask again
		// after a RenewInterval at the latest.
		c.markOver(at, max(1, lease.Verdict.RetryAfter.Microseconds()), s.interval)
		return
	}
	c.overUntil = 0
	// As after a grant of nothing, others may give back what they hold.
	c.emptied(lease.Verdict, at, s.interval)
	if c.gone {
		s.queueReturn(c, lease, lease.Hits)
		return
	}
	c.expire(s, at)
	c.seq++
	g := grant{lease: lease, seq: c.seq}
	for i := range c.grants {
		h := &c.grants[i]
		if h.lease.Hits == 0 {
			*h = g
			return
		}
	}
	// Both slots hold grants: fold the new one into the second when
	// spending it no later than the earlier end keeps every guarantee
	// (any bucket grant, or one of the same window).
	h := &c.grants[1]
	if c.limit.Kind == algorithm.TokenBucket || h.lease.Window == lease.Window {
		h.lease.Hits += lease.Hits
		h.lease.Until = min(h.lease.Until, lease.Until)
		h.lease.Verdict = lease.Verdict
		return
	}
	s.queueReturn(c, lease, lease.Hits)
}

// expire ends the grants that may no longer be spent at now, queueing
// their unspent hits for return, and drops spent ones.
func (c *counter) expire(s *Store, now int64) {
	for i := range c.grants {
		g := &c.grants[i]
		if g.lease.Hits == 0 {
			continue
		}
		if now >= g.lease.Until {
			if unspent := g.lease.Hits - g.spent; c.owed(g.lease, unspent, now, s.interval) {
				s.queueReturn(c, g.lease, unspent)
			}
			*g = grant{}
		} else if g.spent >= g.lease.Hits {
			*g = grant{}
		}
	}
	if c.grants[0].lease.Hits == 0 && c.grants[1].lease.Hits > 0 {
		c.grants[0], c.grants[1] = c.grants[1], grant{}
	}
}

// owed reports whether the unspent hits of a lease that ended at now are
// worth a Return call. A fixed window's hits count no more once their
// window has ended (algorithm.Return gives nothing back for them). A token
// bucket's unspent tokens are kept when they refill within one interval
// and the counter was far from its limit at the last answer: nothing is
// leased within strictBelow of the limit, so no hit waits for them, and
// the Redis call would cost more than they are worth.
func (c *counter) owed(lease algorithm.Lease, unspent, now, interval int64) bool {
	l := c.limit
	switch {
	case unspent <= 0:
		return false
	case l.Kind == algorithm.FixedWindow:
		return now < lease.Window+l.Period
	case l.Kind == algorithm.TokenBucket:
		return c.left < aheadBelow || unspent*l.Period > interval*l.Requests
	}
	return true
}

// owes reports whether c holds unspent hits worth a return at now.
func (c *counter) owes(s *Store, now int64) bool {
	for i := range c.grants {
		g := &c.grants[i]
		if g.lease.Hits > 0 && c.owed(g.lease, g.lease.Hits-g.spent, now, s.interval) {
			return true
		}
	}
	return false
}

// release queues the return of every unspent hit held.
func (c *counter) release(s *Store) {
	for i := range c.grants {
		g := &c.grants[i]
		if g.lease.Hits > 0 {
			s.queueReturn(c, g.lease, g.lease.Hits-g.spent)
		}
		*g = grant{}
	}
}

// forgo drops, without a return, the grants whose unspent hits are not
// worth a call at now (see owed): an idle counter's, before it is
// forgotten.
func (c *counter) forgo(s *Store, now int64) {
	for i := range c.grants {
		g := &c.grants[i]
		if g.lease.Hits > 0 && !c.owed(g.lease, g.lease.Hits-g.spent, now, s.interval) {
			*g = grant{}
		}
	}
}
