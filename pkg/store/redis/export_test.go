package redis

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// ReserveAt is Reserve, also returning the instant in µs at which the
// script granted the first lease.
var ReserveAt = (*Store).reserve

// ReturnAt is Return, also returning the instant in µs at which the script
// took back the first lease, or 0 when nothing was given back.
var ReturnAt = (*Store).giveBack

// ScriptsOnly returns o set to call the script with EVALSHA even where the
// server has Redis Functions.
func ScriptsOnly(o Options) Options {
	o.scriptsOnly = true
	return o
}

// ApplyTogether applies each batch as a single-slot Apply would, except
// that it neither refunds nor reports errors as Apply does, and sends all
// of them in one round trip, as the batcher sends concurrent Applies: the
// batches of one slot share a script call, up to its size limit. It returns
// the instant each batch was decided at and its error.
func ApplyTogether(s *Store, ctx context.Context, batches [][]store.Hit, verdicts [][]algorithm.Verdict) ([]int64, []error) {
	requests := make([]*request, len(batches))
	var groups []*group
	for b, hits := range batches {
		var now int64
		if s.now != nil {
			now = algorithm.Micros(s.now())
		}
		r := new(request)
		r.build(s, hits, now)
		requests[b] = r
		groups = append(groups, r.groups...)
	}
	s.run(ctx, groups)
	at, errs := make([]int64, len(batches)), make([]error, len(batches))
	for b, r := range requests {
		_, errs[b] = r.verdicts(batches[b], verdicts[b])
		at[b] = r.groups[0].decidedAt
	}
	return at, errs
}

// Op is one caller's operation for Together: a batch of Hits to apply
// into Verdicts, lease requests to Reserve into Leases, or leases to
// Return.
type Op struct {
	Hits     []store.Hit
	Verdicts []algorithm.Verdict
	Reserve  []store.LeaseRequest
	Leases   []algorithm.Lease
	Return   []store.LeaseReturn
}

// Together sends ops in one round trip, as the batcher sends concurrent
// Applies, Reserves and Returns: the groups of one slot share a script
// call, in order, up to its size limit. It returns the instant each op was
// decided at (0 for a Return that gave nothing back) and its error; like
// ApplyTogether, it neither refunds nor reports rejections as Apply does.
func Together(s *Store, ctx context.Context, ops []Op) ([]int64, []error) {
	local := time.Now()
	var now int64
	if s.now != nil {
		local = s.now()
		now = algorithm.Micros(local)
	}
	requests := make([]*request, len(ops))
	var groups []*group
	for o, op := range ops {
		r := new(request)
		switch {
		case op.Reserve != nil:
			for i := range op.Reserve {
				q := &op.Reserve[i]
				g, key := r.leaseGroup(s, &q.Counter, now)
				g.addLease(key, i, &q.Counter.Limit, opReserve, q.Want, 0)
			}
		case op.Return != nil:
			for i := range op.Return {
				q := &op.Return[i]
				if unspent := min(q.Unspent, q.Lease.Hits); unspent > 0 && q.Counter.Limit.Kind.Leasable() {
					g, key := r.leaseGroup(s, &q.Counter, now)
					g.addLease(key, i, &q.Counter.Limit, opReturn, unspent, q.Lease.Window)
				}
			}
		default:
			r.build(s, op.Hits, now)
		}
		requests[o] = r
		groups = append(groups, r.groups...)
	}
	s.run(ctx, groups)
	at, errs := make([]int64, len(ops)), make([]error, len(ops))
	for o, r := range requests {
		if len(r.groups) == 0 {
			continue
		}
		at[o] = r.groups[0].decidedAt
		op := ops[o]
		if op.Reserve == nil && op.Return == nil {
			_, errs[o] = r.verdicts(op.Hits, op.Verdicts)
			continue
		}
		for _, g := range r.groups {
			if g.err != nil {
				errs[o] = g.err
				break
			}
			if op.Reserve != nil {
				i := g.hits[0]
				op.Leases[i] = grant(&op.Reserve[i], g.res, g.decidedAt, algorithm.Micros(local))
			}
		}
	}
	return at, errs
}

// ScriptCommands returns the commands the decision script calls, sorted.
func ScriptCommands() []string {
	return slices.Sorted(maps.Keys(scriptCommands))
}
