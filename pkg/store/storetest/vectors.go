package storetest

import (
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/algorithm/algorithmtest"
	"github.com/tollgatehq/tollgate/pkg/store"
)

const (
	us  = time.Microsecond
	ms  = time.Millisecond
	sec = time.Second
)

// Vectors returns the test vectors, a fresh copy on every call: first
// those of algorithmtest.Vectors, each step a batch of one hit on the
// counter of Key "k", then the batch and identity vectors of this package,
// worked out by hand from the batch rules.
func Vectors() []Vector {
	var vs []Vector
	for _, av := range algorithmtest.Vectors() {
		v := Vector{Name: av.Name, Limit: av.Limit, Start: av.Start, Steps: make([]Step, len(av.Steps))}
		for i, s := range av.Steps {
			v.Steps[i] = Step{At: s.At, Hits: []Hit{{Cost: s.Cost, Always: s.Always, Penalty: av.Penalty}}, Want: []algorithm.Verdict{s.Want}}
		}
		vs = append(vs, v)
	}
	return append(vs, []Vector{
		// Batches.
		{
			Name: "batch/all_or_nothing", Limit: fixedWindow(2, sec), Start: algorithmtest.Start,
			Steps: []Step{
				{Hits: []Hit{{Key: "a", Cost: 1}, {Key: "b", Cost: 1}},
					Want: []algorithm.Verdict{ok(2, 1, sec), ok(2, 1, sec)}},
				// b is rejected, so a is not charged and reports its counter.
				{Hits: []Hit{{Key: "a", Cost: 1}, {Key: "b", Cost: 2}},
					Want: []algorithm.Verdict{ok(2, 1, sec), no(2, 1, sec, sec)}},
				{Hits: []Hit{{Key: "a", Cost: 1}}, Want: []algorithm.Verdict{ok(2, 0, sec)}},
				{Hits: []Hit{{Key: "b", Cost: 1}}, Want: []algorithm.Verdict{ok(2, 0, sec)}},
			},
		},
		{
			Name: "batch/rollback_every_algorithm", Start: algorithmtest.Start,
			Steps: []Step{
				{Hits: []Hit{
					{Key: "tb", Limit: tokenBucket(2, 0, sec), Cost: 1},
					{Key: "fw", Limit: fixedWindow(2, sec), Cost: 1},
					{Key: "swc", Limit: slidingCounter(2, sec), Cost: 1},
					{Key: "swl", Limit: slidingLog(2, sec), Cost: 1},
				}, Want: []algorithm.Verdict{ok(2, 1, 500*ms), ok(2, 1, sec), ok(2, 1, 2*sec), ok(2, 1, sec)}},
				{Hits: []Hit{{Key: "full", Limit: fixedWindow(1, sec), Cost: 1}},
					Want: []algorithm.Verdict{ok(1, 0, sec)}},
				{At: 100 * ms, Hits: []Hit{
					{Key: "tb", Limit: tokenBucket(2, 0, sec), Cost: 1},
					{Key: "fw", Limit: fixedWindow(2, sec), Cost: 1},
					{Key: "swc", Limit: slidingCounter(2, sec), Cost: 1},
					{Key: "swl", Limit: slidingLog(2, sec), Cost: 1},
					{Key: "full", Limit: fixedWindow(1, sec), Cost: 1},
				}, Want: []algorithm.Verdict{
					ok(2, 1, 400*ms), ok(2, 1, 900*ms), ok(2, 1, 1900*ms), ok(2, 1, 900*ms),
					no(1, 0, 900*ms, 900*ms),
				}},
				// Had the rolled-back batch charged anything, these would fail.
				{At: 100 * ms, Hits: []Hit{
					{Key: "tb", Limit: tokenBucket(2, 0, sec), Cost: 1},
					{Key: "fw", Limit: fixedWindow(2, sec), Cost: 1},
					{Key: "swc", Limit: slidingCounter(2, sec), Cost: 1},
					{Key: "swl", Limit: slidingLog(2, sec), Cost: 1},
				}, Want: []algorithm.Verdict{ok(2, 0, 900*ms), ok(2, 0, 900*ms), ok(2, 0, 1900*ms), ok(2, 0, sec)}},
				{At: 100 * ms, Hits: []Hit{
					{Key: "tb", Limit: tokenBucket(2, 0, sec), Cost: 0},
					{Key: "fw", Limit: fixedWindow(2, sec), Cost: 0},
					{Key: "swc", Limit: slidingCounter(2, sec), Cost: 0},
					{Key: "swl", Limit: slidingLog(2, sec), Cost: 0},
				}, Want: []algorithm.Verdict{
					no(2, 0, 900*ms, 400*ms), no(2, 0, 900*ms, 900*ms), no(2, 0, 1900*ms, 1400*ms), no(2, 0, sec, 900*ms),
				}},
			},
		},
		{
			Name: "batch/soft_hits", Limit: fixedWindow(1, sec), Start: algorithmtest.Start,
			Steps: []Step{
				{Hits: []Hit{{Key: "a", Cost: 1, Soft: true}, {Key: "b", Cost: 1}},
					Want: []algorithm.Verdict{ok(1, 0, sec), ok(1, 0, sec)}},
				// A rejected soft hit does not block c, which is charged.
				{Hits: []Hit{{Key: "a", Cost: 1, Soft: true}, {Key: "c", Cost: 1}},
					Want: []algorithm.Verdict{no(1, 0, sec, sec), ok(1, 0, sec)}},
				{Hits: []Hit{{Key: "c", Cost: 0}}, Want: []algorithm.Verdict{no(1, 0, sec, sec)}},
				// A hard rejection rolls back an admitted soft hit too.
				{Hits: []Hit{{Key: "d", Cost: 1, Soft: true}, {Key: "b", Cost: 1}},
					Want: []algorithm.Verdict{ok(1, 1, 0), no(1, 0, sec, sec)}},
				{Hits: []Hit{{Key: "d", Cost: 1}}, Want: []algorithm.Verdict{ok(1, 0, sec)}},
			},
		},
		{
			Name: "batch/same_counter_twice", Limit: fixedWindow(3, sec), Start: algorithmtest.Start,
			Steps: []Step{
				{Hits: []Hit{{Key: "a", Cost: 2}, {Key: "a", Cost: 1}},
					Want: []algorithm.Verdict{ok(3, 1, sec), ok(3, 0, sec)}},
				{Hits: []Hit{{Key: "a", Cost: 0}}, Want: []algorithm.Verdict{no(3, 0, sec, sec)}},
				// The second hit sees the first; its rejection undoes both.
				{Hits: []Hit{{Key: "x", Cost: 2}, {Key: "x", Cost: 2}},
					Want: []algorithm.Verdict{ok(3, 3, 0), no(3, 1, sec, sec)}},
				{Hits: []Hit{{Key: "x", Cost: 3}}, Want: []algorithm.Verdict{ok(3, 0, sec)}},
			},
		},

		{
			// A log refunded and then appended to within a batch that is
			// rolled back keeps its entries: the entry at 100 ms must not
			// become one at 200 ms. The hit that blocks the batch is on a
			// second limit of the same descriptor, so a Redis Cluster
			// decides the batch in one slot group, all or nothing (across
			// slot groups a rejection is undone by refunds, which cannot
			// restore the log).
			Name: "batch/log_refund_and_append_rolled_back", Limit: slidingLog(3, sec), Start: algorithmtest.Start,
			Steps: []Step{
				{Hits: []Hit{{Cost: 1}}, Want: []algorithm.Verdict{ok(3, 2, sec)}},
				{At: 100 * ms, Hits: []Hit{{Cost: 1}}, Want: []algorithm.Verdict{ok(3, 1, sec)}},
				{At: 200 * ms, Hits: []Hit{{Cost: -1}, {Cost: 1}, {Limit: fixedWindow(0, sec), Cost: 1}},
					Want: []algorithm.Verdict{ok(3, 1, 900*ms), ok(3, 1, 900*ms), no(0, 0, 0, sec)}},
				{At: 200 * ms, Hits: []Hit{{Cost: 0}}, Want: []algorithm.Verdict{ok(3, 1, 900*ms)}},
			},
		},
		{
			// A hit on a limit Apply cannot evaluate is rejected: when it is
			// not Soft nothing in its batch is charged.
			Name: "batch/invalid_limit", Limit: fixedWindow(2, sec), Start: algorithmtest.Start,
			Steps: []Step{
				{Hits: []Hit{{Key: "a", Cost: 1}, {Key: "bad", Limit: fixedWindow(2, 0), Cost: 1}},
					Want: []algorithm.Verdict{ok(2, 2, 0), {}}},
				{Hits: []Hit{{Key: "a", Cost: 1}, {Key: "bad", Limit: fixedWindow(2, 0), Cost: 1, Soft: true}},
					Want: []algorithm.Verdict{ok(2, 1, sec), {}}},
				{Hits: []Hit{{Key: "a", Cost: 0}}, Want: []algorithm.Verdict{ok(2, 1, sec)}},
			},
		},

		// Always-charged hits (algorithm.ChargeAlways): applied first, in
		// order, and never undone; they block the admitted hits of their
		// batch when rejected, like any hit that is not Soft.
		{
			Name: "batch/always_over_limit_blocks_admitted", Limit: fixedWindow(3, sec), Start: algorithmtest.Start,
			Steps: []Step{
				// b goes to 5 of 3 and is rejected: a is not charged.
				{Hits: []Hit{{Key: "a", Cost: 1}, {Key: "b", Cost: 5, Always: true}},
					Want: []algorithm.Verdict{ok(3, 3, 0), no(3, 0, sec, sec)}},
				{Hits: []Hit{{Key: "a", Cost: 3}}, Want: []algorithm.Verdict{ok(3, 0, sec)}},
				{Hits: []Hit{{Key: "b", Cost: 0, Always: true}}, Want: []algorithm.Verdict{no(3, 0, sec, sec)}},
				// A rejected always-charged hit that is Soft blocks nothing.
				{Hits: []Hit{{Key: "c", Cost: 1}, {Key: "b", Cost: 1, Always: true, Soft: true}},
					Want: []algorithm.Verdict{ok(3, 2, sec), no(3, 0, sec, sec)}},
				{Hits: []Hit{{Key: "c", Cost: 0}}, Want: []algorithm.Verdict{ok(3, 2, sec)}},
			},
		},
		{
			Name: "batch/admitted_rejection_keeps_always", Limit: fixedWindow(2, sec), Start: algorithmtest.Start,
			Steps: []Step{
				// a can never fit; b is charged all the same.
				{Hits: []Hit{{Key: "a", Cost: 3}, {Key: "b", Cost: 1, Always: true}},
					Want: []algorithm.Verdict{no(2, 2, 0, sec), ok(2, 1, sec)}},
				{Hits: []Hit{{Key: "b", Cost: 0}}, Want: []algorithm.Verdict{ok(2, 1, sec)}},
				// b takes the counter to its limit, then a is rejected.
				{Hits: []Hit{{Key: "b", Cost: 1}, {Key: "b", Cost: 1, Always: true}},
					Want: []algorithm.Verdict{no(2, 0, sec, sec), ok(2, 0, sec)}},
				{Hits: []Hit{{Key: "b", Cost: 0, Always: true}}, Want: []algorithm.Verdict{ok(2, 0, sec)}},
			},
		},
		{
			// On one counter the always-charged hit goes first, whatever
			// the request order, and the admitted hit sees its charge.
			Name: "batch/always_first_on_one_counter", Limit: fixedWindow(3, sec), Start: algorithmtest.Start,
			Steps: []Step{
				{Hits: []Hit{{Cost: 2}, {Cost: 2, Always: true}},
					Want: []algorithm.Verdict{no(3, 1, sec, sec), ok(3, 1, sec)}},
				{Hits: []Hit{{Cost: 0}}, Want: []algorithm.Verdict{ok(3, 1, sec)}},
				{Hits: []Hit{{Cost: 1}, {Cost: 1, Always: true}},
					Want: []algorithm.Verdict{no(3, 0, sec, sec), ok(3, 0, sec)}},
				// A new window: both fit, and both are charged.
				{At: sec, Hits: []Hit{{Cost: 1}, {Cost: 1, Always: true}},
					Want: []algorithm.Verdict{ok(3, 1, sec), ok(3, 2, sec)}},
				{At: sec, Hits: []Hit{{Cost: 0, Always: true}}, Want: []algorithm.Verdict{ok(3, 1, sec)}},
			},
		},
		{
			// An always-charged refund is kept when its batch is rejected;
			// an admitted one is rolled back. The hit that blocks the batch
			// is on a second limit of the same descriptor, so a Redis
			// Cluster decides the batch in one slot group (across slot
			// groups a refund is never undone).
			Name: "batch/always_refund_kept", Limit: tokenBucket(10, 0, sec), Start: algorithmtest.Start,
			Steps: []Step{
				{Hits: []Hit{{Cost: 10}}, Want: []algorithm.Verdict{ok(10, 0, sec)}},
				{Hits: []Hit{{Cost: -4, Always: true}, {Limit: fixedWindow(0, sec), Cost: 1}},
					Want: []algorithm.Verdict{ok(10, 4, 600*ms), no(0, 0, 0, sec)}},
				{Hits: []Hit{{Cost: 0}}, Want: []algorithm.Verdict{ok(10, 4, 600*ms)}},
				{Hits: []Hit{{Cost: -4}, {Limit: fixedWindow(0, sec), Cost: 1}},
					Want: []algorithm.Verdict{ok(10, 4, 600*ms), no(0, 0, 0, sec)}},
				{Hits: []Hit{{Cost: 0}}, Want: []algorithm.Verdict{ok(10, 4, 600*ms)}},
			},
		},
		{
			// Like batch/rollback_every_algorithm, with always-charged hits
			// past the limit of every algorithm blocking admitted ones.
			Name: "batch/always_every_algorithm", Start: algorithmtest.Start,
			Steps: []Step{
				{Hits: []Hit{
					{Key: "tb", Limit: tokenBucket(2, 0, sec), Cost: 1},
					{Key: "fw", Limit: fixedWindow(2, sec), Cost: 1},
					{Key: "swc", Limit: slidingCounter(2, sec), Cost: 1},
					{Key: "swl", Limit: slidingLog(2, sec), Cost: 1},
				}, Want: []algorithm.Verdict{ok(2, 1, 500*ms), ok(2, 1, sec), ok(2, 1, 2*sec), ok(2, 1, sec)}},
				{At: 100 * ms, Hits: []Hit{
					{Key: "tba", Limit: tokenBucket(2, 0, sec), Cost: 1},
					{Key: "tb", Limit: tokenBucket(2, 0, sec), Cost: 2, Always: true},
					{Key: "fwa", Limit: fixedWindow(2, sec), Cost: 1},
					{Key: "fw", Limit: fixedWindow(2, sec), Cost: 2, Always: true},
					{Key: "swca", Limit: slidingCounter(2, sec), Cost: 1},
					{Key: "swc", Limit: slidingCounter(2, sec), Cost: 2, Always: true},
					{Key: "swla", Limit: slidingLog(2, sec), Cost: 1},
					{Key: "swl", Limit: slidingLog(2, sec), Cost: 2, Always: true},
				}, Want: []algorithm.Verdict{
					ok(2, 2, 0), no(2, 0, 1400*ms, 400*ms),
					ok(2, 2, 0), no(2, 0, 900*ms, 900*ms),
					// 3 in this window: ⌈3·(1 s − x)/1 s⌉ ≤ 2 from x = 333 334 µs.
					ok(2, 2, 0), no(2, 0, 1900*ms, 1_233_334*us),
					// The log holds 3 entries, the oldest from 0 ms.
					ok(2, 2, 0), no(2, 0, sec, 900*ms),
				}},
				// Nothing admitted was charged: a full cost fits each.
				{At: 100 * ms, Hits: []Hit{
					{Key: "tba", Limit: tokenBucket(2, 0, sec), Cost: 2},
					{Key: "fwa", Limit: fixedWindow(2, sec), Cost: 2},
					{Key: "swca", Limit: slidingCounter(2, sec), Cost: 2},
					{Key: "swla", Limit: slidingLog(2, sec), Cost: 2},
				}, Want: []algorithm.Verdict{ok(2, 0, sec), ok(2, 0, 900*ms), ok(2, 0, 1900*ms), ok(2, 0, sec)}},
				// Every always-charged hit was.
				{At: 100 * ms, Hits: []Hit{
					{Key: "tb", Limit: tokenBucket(2, 0, sec), Cost: 0, Always: true},
					{Key: "fw", Limit: fixedWindow(2, sec), Cost: 0, Always: true},
					{Key: "swc", Limit: slidingCounter(2, sec), Cost: 0, Always: true},
					{Key: "swl", Limit: slidingLog(2, sec), Cost: 0, Always: true},
				}, Want: []algorithm.Verdict{
					no(2, 0, 1400*ms, 400*ms), no(2, 0, 900*ms, 900*ms), no(2, 0, 1900*ms, 1_233_334*us), no(2, 0, sec, 900*ms),
				}},
			},
		},
		{
			// A report of 2 000 000 on every algorithm at once, then
			// refunds that bring each back to exactly its limit: nothing
			// overflows or rounds.
			Name: "batch/always_two_million_every_algorithm", Start: algorithmtest.Start,
			Steps: []Step{
				{Hits: []Hit{
					{Key: "tb", Limit: tokenBucket(10, 0, sec), Cost: 2_000_000, Always: true},
					{Key: "fw", Limit: fixedWindow(10, sec), Cost: 2_000_000, Always: true},
					{Key: "swc", Limit: slidingCounter(10, sec), Cost: 2_000_000, Always: true},
					{Key: "swl", Limit: slidingLog(10, sec), Cost: 2_000_000, Always: true},
				}, Want: []algorithm.Verdict{
					// 2·10^11 µs of refill would be 199 999 s of debt:
					// it stops at ten periods (algorithm.DebtPeriods).
					no(10, 0, 11*sec, 10*sec),
					no(10, 0, sec, sec),
					// The next window's estimate ⌈2·10^6·(1 s − x)/1 s⌉ is
					// 10 from x = 999 995 µs.
					no(10, 0, 2*sec, 1_999_995*us),
					// The log keeps 11 entries.
					no(10, 0, sec, sec),
				}},
				{Hits: []Hit{
					{Key: "tb", Limit: tokenBucket(10, 0, sec), Cost: 0, Always: true},
					{Key: "fw", Limit: fixedWindow(10, sec), Cost: 0, Always: true},
					{Key: "swc", Limit: slidingCounter(10, sec), Cost: 0, Always: true},
					{Key: "swl", Limit: slidingLog(10, sec), Cost: 0, Always: true},
				}, Want: []algorithm.Verdict{
					no(10, 0, 11*sec, 10*sec), no(10, 0, sec, sec), no(10, 0, 2*sec, 1_999_995*us), no(10, 0, sec, sec),
				}},
				{Hits: []Hit{
					// The bucket's debt is 10 s, 100 tokens.
					{Key: "tb", Limit: tokenBucket(10, 0, sec), Cost: -100},
					{Key: "fw", Limit: fixedWindow(10, sec), Cost: -1_999_990},
					{Key: "swc", Limit: slidingCounter(10, sec), Cost: -1_999_990},
					{Key: "swl", Limit: slidingLog(10, sec), Cost: -1},
				}, Want: []algorithm.Verdict{ok(10, 0, sec), ok(10, 0, sec), ok(10, 0, 2*sec), ok(10, 0, sec)}},
				// Each stands at exactly its limit.
				{Hits: []Hit{
					{Key: "tb", Limit: tokenBucket(10, 0, sec), Cost: 0, Always: true},
					{Key: "fw", Limit: fixedWindow(10, sec), Cost: 0, Always: true},
					{Key: "swc", Limit: slidingCounter(10, sec), Cost: 0, Always: true},
					{Key: "swl", Limit: slidingLog(10, sec), Cost: 0, Always: true},
				}, Want: []algorithm.Verdict{ok(10, 0, sec), ok(10, 0, sec), ok(10, 0, 2*sec), ok(10, 0, sec)}},
				{Hits: []Hit{
					{Key: "tb", Limit: tokenBucket(10, 0, sec), Cost: 0},
					{Key: "fw", Limit: fixedWindow(10, sec), Cost: 0},
					{Key: "swc", Limit: slidingCounter(10, sec), Cost: 0},
					{Key: "swl", Limit: slidingLog(10, sec), Cost: 0},
				}, Want: []algorithm.Verdict{
					no(10, 0, sec, 100*ms), no(10, 0, sec, sec), no(10, 0, 2*sec, 1_100_000*us), no(10, 0, sec, sec),
				}},
			},
		},

		{
			// A hit blocked by a penalty rejects its batch; a strike counts
			// whatever the batch's outcome, a soft hit's too.
			Name: "batch/penalty", Limit: fixedWindow(1, sec), Start: algorithmtest.Start,
			Steps: []Step{
				{Hits: []Hit{{Key: "a", Cost: 1, Penalty: batchPenalty}}, Want: []algorithm.Verdict{ok(1, 0, sec)}},
				{Hits: []Hit{{Key: "a", Cost: 1, Penalty: batchPenalty}}, Want: []algorithm.Verdict{no(1, 0, sec, sec)}},
				{At: 100 * ms, Hits: []Hit{{Key: "b", Cost: 1}, {Key: "a", Cost: 1, Penalty: batchPenalty}},
					Want: []algorithm.Verdict{ok(1, 1, 0), pen(1, 10*sec, 10*sec)}},
				{At: 100 * ms, Hits: []Hit{{Key: "b", Cost: 1}}, Want: []algorithm.Verdict{ok(1, 0, 900*ms)}},
				{At: 200 * ms, Hits: []Hit{{Key: "c", Cost: 1}, {Key: "a", Cost: 1, Soft: true, Penalty: batchPenalty}},
					Want: []algorithm.Verdict{ok(1, 0, 800*ms), pen(1, 20*sec, 20*sec)}},
				{At: 300 * ms, Hits: []Hit{{Key: "a", Cost: 0, Penalty: batchPenalty}}, Want: []algorithm.Verdict{pen(1, 40*sec, 40*sec)}},
			},
		},

		// Counter identity: Domain, Entries, Kind and Period.
		{
			Name: "identity/limit_changes", Start: algorithmtest.Start,
			Steps: []Step{
				{Hits: []Hit{{Key: "a", Limit: fixedWindow(3, sec), Cost: 2}}, Want: []algorithm.Verdict{ok(3, 1, sec)}},
				// Requests changed: same counter.
				{Hits: []Hit{{Key: "a", Limit: fixedWindow(5, sec), Cost: 2}}, Want: []algorithm.Verdict{ok(5, 1, sec)}},
				{Hits: []Hit{{Key: "a", Limit: fixedWindow(2, sec), Cost: 0}}, Want: []algorithm.Verdict{no(2, 0, sec, sec)}},
				// Period or Kind changed: another counter.
				{Hits: []Hit{{Key: "a", Limit: fixedWindow(5, 2*sec), Cost: 1}}, Want: []algorithm.Verdict{ok(5, 4, 2*sec)}},
				{Hits: []Hit{{Key: "a", Limit: tokenBucket(5, 0, sec), Cost: 1}}, Want: []algorithm.Verdict{ok(5, 4, 200*ms)}},
				// Burst changed: same bucket, 4.6 tokens of 5.
				{Hits: []Hit{{Key: "a", Limit: tokenBucket(2, 3, sec), Cost: 0}}, Want: []algorithm.Verdict{ok(5, 4, 200*ms)}},
			},
		},
		{
			Name: "identity/entries", Limit: fixedWindow(1, sec), Start: algorithmtest.Start,
			Steps: []Step{
				// Concatenations of these collide; the counters must not.
				{Hits: []Hit{
					{Entries: []store.Entry{{Key: "a", Value: "bc"}}, Cost: 1},
					{Entries: []store.Entry{{Key: "ab", Value: "c"}}, Cost: 1},
					{Entries: []store.Entry{{Key: "a", Value: "b"}, {Key: "c", Value: ""}}, Cost: 1},
					{Entries: []store.Entry{{Key: "a", Value: ""}, {Key: "bc", Value: ""}}, Cost: 1},
					{Entries: []store.Entry{{Key: "", Value: "abc"}}, Cost: 1},
				}, Want: []algorithm.Verdict{ok(1, 0, sec), ok(1, 0, sec), ok(1, 0, sec), ok(1, 0, sec), ok(1, 0, sec)}},
				// Shard does not identify a counter.
				{Hits: []Hit{{Entries: []store.Entry{{Key: "a", Value: "bc"}}, Shard: "elsewhere", Cost: 0}},
					Want: []algorithm.Verdict{no(1, 0, sec, sec)}},
			},
		},
	}...)
}

func tokenBucket(requests, burst int64, period time.Duration) algorithm.Limit {
	return algorithm.Limit{Kind: algorithm.TokenBucket, Requests: requests, Burst: burst, Period: period.Microseconds()}
}

func fixedWindow(requests int64, period time.Duration) algorithm.Limit {
	return algorithm.Limit{Kind: algorithm.FixedWindow, Requests: requests, Period: period.Microseconds()}
}

func slidingCounter(requests int64, period time.Duration) algorithm.Limit {
	return algorithm.Limit{Kind: algorithm.SlidingWindowCounter, Requests: requests, Period: period.Microseconds()}
}

func slidingLog(requests int64, period time.Duration) algorithm.Limit {
	return algorithm.Limit{Kind: algorithm.SlidingWindowLog, Requests: requests, Period: period.Microseconds()}
}

// batchPenalty is the penalty of the batch/penalty vector: no strike
// tolerated, cooldowns of 10 s doubling up to a minute.
var batchPenalty = &algorithm.Penalty{
	Cooldown: (10 * sec).Microseconds(), Factor: 2, Max: time.Minute.Microseconds(), ForgiveAfter: time.Minute.Microseconds(),
}

// pen is the verdict of a hit rejected by a penalty's cooldown.
func pen(limit int64, resetAfter, retryAfter time.Duration) algorithm.Verdict {
	return algorithm.Verdict{Penalized: true, Limit: limit, ResetAfter: resetAfter, RetryAfter: retryAfter}
}

// ok is an admitted verdict.
func ok(limit, remaining int64, resetAfter time.Duration) algorithm.Verdict {
	return algorithm.Verdict{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: resetAfter}
}

// no is a rejected verdict.
func no(limit, remaining int64, resetAfter, retryAfter time.Duration) algorithm.Verdict {
	return algorithm.Verdict{Limit: limit, Remaining: remaining, ResetAfter: resetAfter, RetryAfter: retryAfter}
}
