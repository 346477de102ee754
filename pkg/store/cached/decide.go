package cached

import (
	"context"
	"fmt"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// decision is what Apply did with one hit.
type decision struct {
	c *counter
	// inner marks a hit sent to the inner store with cost strict.
	inner  bool
	strict int64
	// always marks hits taken from a lease by an always-charged hit,
	// never given back.
	always bool
	// probe marks a strict hit whose verdict tells its counter how much
	// is left.
	probe  bool
	parts  [2]part
	nparts int
}

// part is hits taken from one grant.
type part struct {
	seq   uint64
	n     int64
	lease algorithm.Lease
}

// leased reports whether h may be decided from a lease. A hit under a
// penalty never is: its rejections are strikes the shared store counts,
// and its cooldown is shared there.
func leased(h *store.Hit) bool {
	return h.Cached && h.Limit.Kind.Leasable() && h.Penalty == nil
}

// Apply implements store.Store. Cached hits of a leasable algorithm are
// decided from this instance's leases, reserving or waiting for one when
// a lease is empty; the others go to the inner store in one batch. The
// batch stays all or nothing (see the package doc).
func (s *Store) Apply(ctx context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	if len(verdicts) != len(hits) {
		return fmt.Errorf("cached store: %d verdicts for %d hits", len(verdicts), len(hits))
	}
	leasing := false
	for i := range hits {
		leasing = leasing || leased(&hits[i])
	}
	if !leasing || s.closed.Load() {
		s.m.paths[pathStrict].Add(int64(len(hits)))
		err := s.inner.Apply(ctx, hits, verdicts)
		if err != nil { // observe allocates, even for nil
			s.observe(err)
		}
		return err
	}
	var inline [inlineHits]decision
	ds := inline[:0]
	if len(hits) > inlineHits {
		ds = make([]decision, len(hits))
	}
	ds = ds[:len(hits)]
	now := s.now()
	rejected, strict := false, 0
	// Always-charged hits first, as store.Store's batch rule orders them.
	for pass := range 2 {
		for i := range hits {
			h := &hits[i]
			if (h.Limit.Charge == algorithm.ChargeAlways) != (pass == 0) {
				continue
			}
			d := &ds[i]
			if !leased(h) {
				d.inner, d.strict = true, h.Cost
				s.m.paths[pathStrict].Add(1)
			} else if err := s.decide(ctx, h, d, &verdicts[i], &now); err != nil {
				s.giveBack(ds, verdicts, now, false)
				return err
			}
			if d.inner {
				strict++
			} else if !verdicts[i].Allowed && !h.Soft {
				rejected = true
			}
		}
	}
	if strict > 0 {
		if err := s.applyStrict(ctx, hits, ds, verdicts, strict, rejected, now); err != nil {
			s.giveBack(ds, verdicts, now, false)
			return err
		}
		for i := range hits {
			if ds[i].inner && !verdicts[i].Allowed && !hits[i].Soft {
				rejected = true
			}
		}
	}
	if rejected {
		s.giveBack(ds, verdicts, now, true)
	}
	return nil
}

// applyStrict sends the hits marked inner to the inner store as one
// batch. When the batch is already rejected, hits that are not always
// charged are sent as checks (cost 0), for their statuses only.
func (s *Store) applyStrict(ctx context.Context, hits []store.Hit, ds []decision, verdicts []algorithm.Verdict, n int, rejected bool, now int64) error {
	var inlineH [inlineHits]store.Hit
	var inlineV [inlineHits]algorithm.Verdict
	var inlineI [inlineHits]int
	sh, sv, si := inlineH[:0], inlineV[:0], inlineI[:0]
	if n > inlineHits {
		sh, sv, si = make([]store.Hit, 0, n), make([]algorithm.Verdict, 0, n), make([]int, 0, n)
	}
	for i := range hits {
		if !ds[i].inner {
			continue
		}
		h := hits[i]
		h.Cost = ds[i].strict
		if rejected && h.Limit.Charge != algorithm.ChargeAlways {
			h.Cost = 0
		}
		sh, sv, si = append(sh, h), append(sv, algorithm.Verdict{}), append(si, i)
	}
	if err := s.inner.Apply(ctx, sh, sv); err != nil {
		s.observe(err)
		return err
	}
	for j, i := range si {
		verdicts[i] = sv[j]
		if d := &ds[i]; d.probe {
			sh := &s.shards[d.c.key%shardCount]
			sh.mu.Lock()
			d.c.strictAnswer(sv[j], hits[i].Cost, now, s.interval)
			sh.mu.Unlock()
		}
	}
	return nil
}

// decide decides one cached hit at *now: from the lease when it has room,
// else after waiting for or making a reservation; what no lease covers is
// marked for the inner store. After a wait it reads the clock again into
// *now: a lease that ended meanwhile must not be spent.
func (s *Store) decide(ctx context.Context, h *store.Hit, d *decision, v *algorithm.Verdict, nowp *int64) error {
	now := *nowp
	if h.Cost < 0 {
		// A refund goes to the shared counter, where it helps every
		// instance; a counter known to be over may admit again.
		s.forgetOver(h)
		d.inner, d.strict = true, h.Cost
		s.m.paths[pathStrict].Add(1)
		return nil
	}
	for attempt := range attempts {
		sh, c := s.counter(h, now)
		if attempt == 0 {
			c.touch(h, now, s.interval)
		}
		res := c.spend(s, h, d, v, now)
		if res == spendEmpty && attempt == attempts-1 {
			// Other hits took what the reservations brought: the shared
			// counter decides.
			d.inner, d.strict = true, h.Cost
			res = spendStrict
		}
		switch res {
		case spendLocal:
			s.maybeRenew(c, now)
			sh.mu.Unlock()
			if attempt == 0 {
				s.m.paths[pathLocal].Add(1)
			} else {
				s.m.paths[pathRenewalWait].Add(1)
			}
			return nil
		case spendOver:
			sh.mu.Unlock()
			s.m.paths[pathOverLimit].Add(1)
			return nil
		case spendStrict:
			sh.mu.Unlock()
			s.m.paths[pathStrict].Add(1)
			return nil
		}
		sh.mu.Unlock()
		if err := s.acquire(ctx, c, h.Cost); err != nil {
			return err
		}
		now = s.now()
		*nowp = now
	}
	panic("unreachable")
}

// giveBack undoes the local spends of the hits that are not always
// charged; with status, the admitted ones then report their counters as
// they stand.
func (s *Store) giveBack(ds []decision, verdicts []algorithm.Verdict, now int64, status bool) {
	queued := false
	for i := range ds {
		d := &ds[i]
		if d.c == nil || d.always || d.inner {
			continue
		}
		sh := &s.shards[d.c.key%shardCount]
		sh.mu.Lock()
		for _, p := range d.parts[:d.nparts] {
			if !d.c.unspend(p) {
				s.queueReturn(d.c, p.lease, p.n)
				queued = true
			}
		}
		d.nparts = 0
		if status && verdicts[i].Allowed {
			verdicts[i] = d.c.status(now)
		}
		sh.mu.Unlock()
	}
	if queued {
		s.wake()
	}
}
