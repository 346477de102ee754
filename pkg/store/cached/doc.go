// Package cached is the store behind precision: cached. It stands in front
// of the shared store (Redis) and decides most hits of a rule from a
// lease: a budget of hits this instance reserved from the shared counter
// in one call (algorithm.Reserve), charged to that counter at the grant,
// and spent here with no I/O.
//
// # What it guarantees
//
// The fleet never admits more than the strict algorithm allows, because
// no hit is admitted here that was not first charged to the shared
// counter. Per algorithm (the invariants are stated and property-tested in
// pkg/algorithm/lease.go):
//
//   - Fixed window: a lease is spent only before its Until, which is at
//     the latest its window's end, so the hits the fleet admits in a window
//     never exceed Requests.
//   - Sliding-window counter: the same, and the previous window's weight
//     only falls during a window, so a leased hit spent later finds the
//     estimate no higher than at the grant.
//   - Token bucket: the fleet admits in any interval at most what the
//     strict bucket admits in it plus the tokens leased and unspent at its
//     start, each lease at most a 64th of what the bucket held at its
//     grant. A lease granted from a bucket at most half full lasts
//     Options.Lifetime (500 ms by default); one from a fuller bucket lives
//     longer, in proportion, up to Options.MaxLifetime (30 s) from a full
//     one: a bucket far from empty can lend for long, as nobody is near
//     its limit. While a bucket stays at most half full the bound is the
//     old one: at most what the strict bucket admits in d + Lifetime.
//   - Sliding-window log: never leased; its hits go to the inner store,
//     as do the hits of rules whose precision is strict (Hit.Cached false)
//     and every hit under a penalty (Hit.Penalty), whatever its precision:
//     each of its rejections may be a strike, and its cooldown is shared,
//     so only the inner store can decide it.
//
// Local clocks: Until is compared with Options.Now, read again after any
// wait for a reservation (a grant answered after its window ended must not
// be spent in the next), so it must read the clock the shared counter
// charges by; a skew of ε lets a lease be spent up to ε past its end.
//
// # Batches
//
// A batch stays all or nothing, with store.Store's batch rule. Its leased
// hits are decided first (always-charged ones before the others), taking
// from the lease under the counter's lock. If a leased hit that is not
// Soft is rejected, nothing else is charged: the local spends are given
// back to the lease and the strict hits go to the inner store as checks
// (cost 0) for their statuses. Otherwise the strict hits go to the inner
// store in one batch, and if it rejects one that is not Soft (or fails),
// the local spends are given back. An always-charged hit takes what the
// lease holds and sends the rest to the inner store at once as an
// always-charged hit; neither part is ever given back. A refund (cost < 0)
// goes to the inner store, where it serves the whole fleet, and clears the
// counter's over-limit state here; the lease is not credited.
//
// # Lease size and renewal
//
// A lease is reserved only where it saves calls: for a counter this
// instance expects to see at least twice within the lease's horizon (its
// window's end; a token bucket's Lifetime), from the average gap between
// its hits here and its demand over the last RenewInterval. A counter seen
// once, or too sparse to spend a lease, is decided by one strict call of
// the inner store, with no reservation ahead and nothing to give back, so
// that on any traffic cached costs the shared store at most the calls
// strict does — unless the lease is free: a token bucket far from its
// limit lends, in one call, as many tokens as refill within one
// RenewInterval (at most a 64th of what is left), which are never given
// back (see below), so such a lease costs what a strict decision does
// and serves the counter's next hits. (A counter without a lease is kept, to learn its gap, as
// long as a lease would live — its window, a bucket lease's lifetime — at
// most a minute, or four of its gaps.)
//
// A window's lease asks for the demand expected until the window ends —
// a counter seen a few times a window reserves once a window and spends
// the rest locally —, a token bucket's for the demand expected over a
// lease's life when it is longer than Lifetime (a bucket more than half
// full) and otherwise for one RenewInterval (100 ms) of its recent local
// demand (the hits of the current or previous interval, whichever is
// larger); at least the hit waiting for it, and at most what
// the counter held for everyone at the last answer divided by 64
// (shareDivisor): a holder takes a small share of what is left, so leases
// shrink as the counter fills. Below 256 left (strictBelow), a hit no
// lease covers is decided strictly by the inner store, and below 512 left
// (aheadBelow) nothing is reserved ahead, so near its limit a counter
// behaves exactly as a strict one; the verdicts of those strict hits tell
// the counter how much is left, and leasing resumes when it is more (a new
// window, a refilled bucket). "Left" after a window ends is the whole
// limit for a fixed window, but for a sliding-window counter only what
// the previous window's weight leaves of it, that window taken to hold
// what the last answer had used: a full window weighs nearly fully at the
// start of the next.
//
// A renewal is queued when a quarter of the last grant or less is left
// (or a bucket lease ends within a RenewInterval) and the counter expects
// at least two more hits within the horizon, one in flight per counter; the Store's goroutine sends all queued renewals in one Reserve
// call, so many counters share a round trip. A hit that finds its lease
// empty waits for the renewal in flight within its context, or reserves
// itself (the renewal_wait path); after three tries it is decided
// strictly.
//
// A grant of nothing means the counter has no room: its hits are rejected
// here (the over_limit path) with the counter's own verdict, ResetAfter
// and RetryAfter counted down from the grant, until the RetryAfter it gave
// or one RenewInterval, whichever is sooner (another instance may give its
// lease back); the RetryAfter reported is the counter's own. A strict
// rejection of a cost-1 hit does the same, and so does a strict admission
// that leaves a token bucket without a whole token, until its next token
// (after a grant that does, for at most one RenewInterval). The next token is computed from the
// answer's ResetAfter as of when the call was sent, so it is never later
// than the shared bucket's; when a token takes longer to refill than a
// round trip, a saturated bucket costs one round trip per token admitted
// rather than two.
//
// # Statuses
//
// An admitted hit reports Remaining as what the counter held for everyone
// at the last answer plus what this instance holds unspent, and ResetAfter
// counted down from that answer. Remaining can be off by what the other
// instances spent, reserved or gave back since (at most their leases plus
// one RenewInterval of their demand), and for a bucket by the refill since
// the answer; ResetAfter by the same traffic.
//
// # False rejections
//
// A hit is rejected although the fleet admitted less than the limit only
// while hits are charged to the shared counter but not yet admitted:
// other instances' unspent leases, and reservations whose answer is still
// on its way. Those are at most the sum of their leases, each at most 1/64
// of what was left at its grant, none within 256 of the limit and none
// reserved ahead within 512, and a lease ends with its window. Every
// rejection while such a hit is held counts, so one held hit makes many
// false rejections on a counter saturated by steady traffic (a sliding
// window or bucket that frees room continuously, and stays near its
// limit); hence the wide margins. A counter marked over (see above) asks
// again after one RenewInterval at most, so hits given back by others
// (an idle or evicted counter, a reload, Close) reach it within that.
//
// Two judges follow, one per kind of demand. A counter whose demand is
// under its limit is judged hit by hit: fewer than 0.1 % of its admitted
// hits may be rejected while the strict algorithm would have admitted
// them. A saturated counter — a client pushing past its limit — is judged
// by capacity: the fleet admits at least 99.5 % of what the strict
// algorithm admits for the same demand, never more than the guarantee
// above allows. The per-hit judge says little there: every window is
// full, so one hit held anywhere for a moment makes each rejection
// meanwhile a false one, while what the client gets, its limit's rate,
// is what matters. Near its limit a counter is decided strictly (above),
// so a saturated client is admitted at its limit's rate: one call per
// hit admitted near the limit, its rejections answered here until the
// reset or next token the counter gave.
//
// TestCachedFleet (three instances on one real Redis, in integration) and
// TestFleetNeverExceedsTheLimit (in process) hold both judges; make bench reports what the former measures (see the
// README's load testing section). The fleet test judges a hit decided in
// Redis at the script's instant: judged at the end of its call instead, a
// strict rejection looks false by the room that freed during the round
// trip.
//
// An instance that dies without Close takes its unspent leases with it:
// those hits stay charged until their window ends, or for a bucket until
// they refill, and are at most what it held (TestKilledHolder and, for a
// bucket, TestKilledBucketHolder measure this, and on a real Redis
// TestCachedKilledHolder and TestCachedKilledProcess, the latter with a
// process killed with SIGKILL, standalone and on a Cluster, in
// integration). Nothing a dead or slow instance does can cause overage.
//
// # Lifecycle
//
// Unspent hits go back (algorithm.Return, batched in one Return call per
// tick) when a lease reaches its Until, when a counter has had no hit for
// IdleAfter (1 s) or four of its average gaps, whichever is longer, when a counter is evicted to stay within MaxKeys, when
// Reset or Drop forget it (package fleet's Handler calls Reset after a
// reload that changed the rules, and Drop for the counters a changed
// override covers), and on Close. A lease that reaches its Until is not
// given back when that would change nothing worth a call: a fixed
// window's hits once their window is over, and a token bucket's unspent
// tokens when they refill within one RenewInterval and the counter was at
// least 512 from its limit at the last answer (no hit near the limit
// waits for them). The Store's one goroutine renews, returns and, every
// RenewInterval, ends expired leases and forgets idle counters among the
// counters that hold leases, and among all of them every tenth
// RenewInterval (many counters are kept without a lease, to learn their
// gaps); Close stops it and returns everything.
//
// # Outages
//
// When the Leaser fails, hits are still decided from the leases held;
// a hit that needs a reservation gets the Leaser's error (which wraps
// store.ErrUnavailable), and the limiter answers it with the rule's
// failure mode. A hit waiting for another's reservation gives up with that
// reservation's failure (unless it failed only because its caller's
// context ended: the waiter then reserves itself), or as soon as the
// shared store refuses any call of this Store with a
// store.RetryAfterError, as an open circuit breaker does. On a hung Redis
// a waiter is thus released by the first call the open breaker refuses,
// or when the reservation it waits for fails (a background renewal within
// Options.Timeout), not at its own deadline; with no other call and a
// reserving hit whose deadline is as long as its own, it still waits that
// long (TestWaitersGiveUpOnAHungRedis in integration). Returns that fail
// are dropped (the hits stay charged: a false rejection, never overage).
// A hung Redis may still run, once it resumes, the calls that timed out:
// reservations nobody holds, charged until their window ends (false
// rejections again).
//
// A Redis that restarts without its data starts every counter again, as
// it does for strict precision; what the instances still hold of leases
// charged before is spent (or given back) on top of that, so from the
// restart on a window admits at most the limit plus what was held at the
// restart (TestCachedRedisFaults in integration measures the outage and
// the recovery, with Redis killed and hung).
//
// # What it does not do
//
// It does not lease sliding-window logs, does not lease to hits of a
// batch the lease cannot cover in full (they wait or go strict), and
// does not know how many instances hold leases on a counter: the share
// rule assumes nothing about the fleet's size. A Redis script that reports
// the holders could divide by them instead.
package cached
