package redis

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// Leases: Reserve and Return are package algorithm's Reserve and Return on
// the counters Apply uses, so that the cached store (package cached) can
// lease budgets from Redis.
//
// A lease operation travels as a group of its own in the script's argv
// (apply.lua: a group whose count is 0, then 7 integers), not as a second
// function of the library: it then shares everything a hit has, the same
// key, state layout and TIME, the batcher (reservations of many counters,
// and of concurrent Applies, leave in one round trip), the merging of a
// slot's groups into one script call, and one read and one write of each
// counter per call. A second function would need its own call per slot and
// could not share a call with Applies.
//
// Clocks: the script grants a lease on the Redis server's clock (or on
// Options.Now), but the cached store compares Lease.Until with its own.
// Reserve therefore hands back Until on the local clock, time.Now (or
// Options.Now) as the call started plus what was left of the lease when
// the script granted it: the local start comes before the grant, so a
// lease never ends later locally than in Redis, whatever the skew between
// the clocks; it ends earlier by the time the call took to reach Redis.
// Window stays on the server's clock, as Return needs it.

// The operations of a lease group (apply.lua).
const (
	opReserve = 1
	opReturn  = 2
)

// addLease appends lease operation op on key, for item i of its batch,
// to g, an empty group: amount is the hits wanted or given back, and
// window the returned lease's Window.
func (g *group) addLease(key string, i int, l *algorithm.Limit, op, amount, window int64) {
	g.keys = append(g.keys, key)
	g.hits = append(g.hits, i)
	// The count newGroup wrote stays 0, which marks a lease operation.
	for _, x := range [...]int64{int64(l.Kind), l.Requests, l.Burst, l.Period, amount, op, window} {
		g.args = binary.LittleEndian.AppendUint64(g.args, uint64(x))
	}
}

// leaseGroup adds a group for a lease operation on the counter of h to r.
func (r *request) leaseGroup(s *Store, h *store.Hit, now int64) (*group, string) {
	b, start, end := appendKey(append(r.buf[:0], s.prefix...), h)
	r.buf = b
	slot := 0
	if s.cluster {
		slot = int(crc16(b[start:end]) % slots)
	}
	return r.newGroup(now, slot), string(b)
}

// Reserve grants leases[i] for reqs[i] as algorithm.Reserve does, in one
// round trip (one script call per slot, shared with concurrent Applies),
// each charged to its counter at once. Lease.Until is on the local clock
// and Lease.Window on Redis's (see the comment at the top of lease.go).
// An outage returns an error wrapping store.ErrUnavailable, and no lease
// is granted by a failed call, though a lease granted by a call whose
// answer was lost stays charged (false rejections, never overage).
func (s *Store) Reserve(ctx context.Context, reqs []store.LeaseRequest, leases []algorithm.Lease) error {
	_, err := s.reserve(ctx, reqs, leases)
	return err
}

// reserve is Reserve, also returning the instant (µs, the script's clock)
// the first lease was granted at.
func (s *Store) reserve(ctx context.Context, reqs []store.LeaseRequest, leases []algorithm.Lease) (decidedAt int64, err error) {
	if len(leases) != len(reqs) {
		return 0, fmt.Errorf("redis store: %d leases for %d lease requests", len(leases), len(reqs))
	}
	if len(reqs) == 0 {
		return 0, nil
	}
	var now int64
	local := time.Now()
	if s.now != nil {
		local = s.now()
		now = algorithm.Micros(local)
	}
	r := s.requests.Get().(*request)
	r.groups = r.groups[:0]
	for i := range reqs {
		q := &reqs[i]
		g, key := r.leaseGroup(s, &q.Counter, now)
		g.addLease(key, i, &q.Counter.Limit, opReserve, q.Want, 0)
	}
	if err := s.lease(ctx, r, "reserving"); err != nil {
		return 0, err
	}
	start := algorithm.Micros(local)
	for _, g := range r.groups {
		i := g.hits[0]
		leases[i] = grant(&reqs[i], g.res, g.decidedAt, start)
	}
	decidedAt = r.groups[0].decidedAt
	s.requests.Put(r)
	return decidedAt, nil
}

// grant decodes a reservation's results, granted at at (µs, the script's
// clock), into a Lease whose Until is on the clock that read start when
// the call began.
func grant(q *store.LeaseRequest, res []int64, at, start int64) algorithm.Lease {
	v := verdict(res)
	v.Allowed = res[0]&1 == 1
	l := algorithm.Lease{Hits: res[0] >> 1, Verdict: v}
	if l.Hits == 0 {
		return l
	}
	l.Window, l.Until = at, at+max(q.Lifetime.Microseconds(), 0)
	if q.Counter.Limit.Kind != algorithm.TokenBucket {
		p := q.Counter.Limit.Period
		l.Window = at - ((at%p)+p)%p // algorithm.windowStart
		l.Until = min(l.Until, l.Window+p)
	}
	l.Until = start + (l.Until - at)
	return l
}

// Return gives back the unspent hits of leases as algorithm.Return does,
// in one round trip. An outage returns an error wrapping
// store.ErrUnavailable; hits that were not given back stay charged.
func (s *Store) Return(ctx context.Context, returns []store.LeaseReturn) error {
	_, err := s.giveBack(ctx, returns)
	return err
}

// giveBack is Return, also returning the instant (µs, the script's clock)
// the first lease was given back at, or 0 when none was.
func (s *Store) giveBack(ctx context.Context, returns []store.LeaseReturn) (decidedAt int64, err error) {
	var now int64
	if s.now != nil {
		now = algorithm.Micros(s.now())
	}
	r := s.requests.Get().(*request)
	r.groups = r.groups[:0]
	for i := range returns {
		q := &returns[i]
		unspent := min(q.Unspent, q.Lease.Hits)
		if unspent <= 0 || !q.Counter.Limit.Kind.Leasable() {
			continue
		}
		g, key := r.leaseGroup(s, &q.Counter, now)
		g.addLease(key, i, &q.Counter.Limit, opReturn, unspent, q.Lease.Window)
	}
	if len(r.groups) == 0 {
		s.requests.Put(r)
		return 0, nil
	}
	if err := s.lease(ctx, r, "returning leases"); err != nil {
		return 0, err
	}
	decidedAt = r.groups[0].decidedAt
	s.requests.Put(r)
	return decidedAt, nil
}

// lease runs the lease groups of r and returns the first failure, as
// Apply does.
func (s *Store) lease(ctx context.Context, r *request, doing string) error {
	if err := s.exec(ctx, r.groups); err != nil {
		// Calls may still be in flight: r is not reused.
		return err
	}
	for _, g := range r.groups {
		if g.err != nil {
			return s.unavailable(ctx, g.err, doing)
		}
	}
	return nil
}
