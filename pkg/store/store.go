// Package store defines how the limiter hands a batch of hits to a counting
// backend, the identity of the counters they count against (Counter), how
// counters are cleared (Clearer), and the errors a backend reports:
// ErrUnavailable, which the limiter answers by the rules' failure modes,
// and RetryAfterError, which tells it when to come back. Backends live in
// sub-packages: memory (in process, the default and the fallback of
// failure mode local) and redis (shared by a fleet). Layers wrap a store:
// breaker in a circuit breaker, overlimit answers counters known to be
// over their limit without it, and cached decides the hits of cached
// limits from leases on the shared counters. storetest holds stores for
// tests.
package store

import (
	"context"
	"encoding/binary"
	"errors"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// Entry is one key/value pair of a descriptor as it is counted.
type Entry struct {
	Key   string
	Value string
}

// Hit asks a store to count Cost against one limit of one descriptor.
//
// A counter is identified by Domain, Entries, Limit.Kind and Limit.Period
// (Hit.Counter): changing Requests or Burst keeps the count.
type Hit struct {
	Domain  string
	Entries []Entry
	// Shard is the value that groups keys: Redis uses it as the hash tag, so
	// every hit with the same Shard lands in one slot and one script call.
	Shard string
	Limit algorithm.Limit
	// Cost is the number of hits: 0 checks without consuming, a negative
	// cost refunds.
	Cost int64
	// Soft marks a hit that never blocks the others of its batch (shadow
	// and quota-mode rules). A rejected soft hit still consumes nothing,
	// unless its Limit.Charge is algorithm.ChargeAlways.
	Soft bool
	// Cached marks a hit whose rule's precision is cached: a store that
	// leases budgets may decide the hit from a lease.
	Cached bool
	// Penalty, when set, is the escalating cooldown of the counter's
	// clients that ignore Retry-After (algorithm.ApplyPenalty). Its state
	// is kept by the store beside the counter, under the counter's
	// identity; every hit of one counter should carry the same Penalty.
	// Layers that answer hits without the store (leases, caches of
	// rejections) must pass a hit with a Penalty through to it, so that
	// strikes are counted and cooldowns shared.
	Penalty *algorithm.Penalty
}

// Counter is a counter's identity: what every Hit with the same Domain,
// Entries, Limit.Kind and Limit.Period counts against, and the Shard that
// places it. Layers that hold state of counters in process (leases,
// over-limit cache entries) forget it by Counter, and an instance names
// the counters it reset to the others of its fleet by Counter.
type Counter struct {
	Domain  string
	Entries []Entry
	Shard   string
	Kind    algorithm.Kind
	// Period is the limit's period in µs, as algorithm.Limit has it.
	Period int64
}

// Counter returns the counter h counts against. Its Entries are h's, not
// a copy.
func (h *Hit) Counter() Counter {
	return Counter{Domain: h.Domain, Entries: h.Entries, Shard: h.Shard, Kind: h.Limit.Kind, Period: h.Limit.Period}
}

// AppendIdentity appends to b the encoding of the counter h counts
// against, as Counter.AppendIdentity does.
func (h *Hit) AppendIdentity(b []byte) []byte {
	return appendIdentity(b, h.Domain, h.Entries, h.Limit.Kind, h.Limit.Period)
}

// AppendIdentity appends to b the encoding of c: Domain, Entries, Kind and
// Period (not Shard, which only places it), every string prefixed by its
// length, so that no two counters share an encoding. The stores that keep
// counters in process hash it into their keys.
func (c *Counter) AppendIdentity(b []byte) []byte {
	return appendIdentity(b, c.Domain, c.Entries, c.Kind, c.Period)
}

func appendIdentity(b []byte, domain string, entries []Entry, kind algorithm.Kind, period int64) []byte {
	b = binary.AppendUvarint(b, uint64(len(domain)))
	b = append(b, domain...)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for i := range entries {
		e := &entries[i]
		b = binary.AppendUvarint(b, uint64(len(e.Key)))
		b = append(b, e.Key...)
		b = binary.AppendUvarint(b, uint64(len(e.Value)))
		b = append(b, e.Value...)
	}
	b = append(b, byte(kind))
	return binary.LittleEndian.AppendUint64(b, uint64(period))
}

// Store applies batches of hits.
//
// Apply decides every hit and fills verdicts[i] for hits[i], in two
// phases:
//
//  1. The hits whose Limit.Charge is algorithm.ChargeAlways are applied
//     first, in request order, each seeing its counter as the earlier ones
//     left it. Each takes effect whatever its verdict (algorithm.Apply
//     charges it past the limit when it does not fit) and reports its own
//     verdict. Nothing undoes them: not a rejection elsewhere in the batch,
//     not a store's compensation across slot groups.
//  2. The other hits (algorithm.ChargeAdmitted) are then decided in
//     request order, each seeing its counter as every earlier-applied hit
//     left it, always-charged ones included. They are all-or-nothing: when
//     any hit that is not Soft was rejected, in either phase, none of them
//     consumes anything, and each admitted one reports its counter as it
//     stands (Allowed, with the Remaining and ResetAfter of a check);
//     otherwise every admitted one is charged. A rejected ChargeAdmitted
//     hit never consumes.
//
// A hit with a Penalty is decided by algorithm.ApplyPenalty instead of
// algorithm.Apply, in the same order, each seeing the penalty state as the
// earlier hits on its counter left it. The penalty state takes effect
// whatever the batch's outcome (a strike counts even when another hit
// rejected the batch, and a hit rejected by a cooldown rejects its batch
// like any rejection), and a rejected hit never changes its counter.
//
// A batch without always-charged hits is thus simply all-or-nothing.
// len(verdicts) must equal len(hits).
type Store interface {
	Apply(ctx context.Context, hits []Hit, verdicts []algorithm.Verdict) error
}

// ErrUnavailable reports that a store could not decide, such as a Redis
// outage or an open circuit breaker. Stores wrap it so callers can apply a
// rule's failure mode with errors.Is.
var ErrUnavailable = errors.New("store unavailable")

// RetryAfterError is an error that knows when the store may answer again,
// such as the refusal of a circuit breaker that is open. Stores return it
// wrapping ErrUnavailable; callers find it with errors.As, so that a rule
// that fails closed can tell clients when to come back. RetryAfter returns
// the wait, or 0 when it is not known.
type RetryAfterError interface {
	error
	RetryAfter() time.Duration
}
