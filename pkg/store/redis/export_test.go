package redis

import (
	"context"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// ApplyAt is Apply, also returning the instant in µs at which the script
// decided the batch's first slot group: the Redis server's TIME when
// Options.Now is nil.
var ApplyAt = (*Store).apply

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
