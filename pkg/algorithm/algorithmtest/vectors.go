// Package algorithmtest holds hand-worked test vectors for package
// algorithm: scenarios of one counter, each a Limit and a sequence of hits
// at exact instants with every Verdict field expected, to the µs.
//
// Package algorithm's own test runs them through Apply alone. Package
// storetest runs them, with vectors of its own for the batch rules and the
// identity of counters, against every store: the memory store, and real
// Redis (standalone and Cluster) through the Lua script, which must agree
// with Apply bit for bit. A new piece of counting logic gets vectors here
// first.
package algorithmtest

import (
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// Start is 2025-06-15T13:46:40Z in µs, where the vectors begin: a whole
// second, 40 s into its minute and 100 s into its 5-minute window, so
// windows aligned to the epoch are visibly not aligned to a vector's first
// hit.
const Start = 1_750_000_000_000_000

const (
	us     = time.Microsecond
	ms     = time.Millisecond
	sec    = time.Second
	minute = time.Minute
	year   = 365 * 24 * time.Hour
)

// Vector is one scenario: hits on one counter, applied in order, each at an
// exact instant, with the verdicts expected.
type Vector struct {
	// Name is unique, such as "token_bucket/refund"; it begins with the
	// algorithm's configuration name, or "invalid/" for a limit that fails
	// Validate.
	Name  string
	Limit algorithm.Limit
	// Start is the µs timestamp that step offsets count from.
	Start int64
	// Penalty, when set, applies to every step (algorithm.ApplyPenalty),
	// its state carried from step to step beside the counter's.
	Penalty *algorithm.Penalty
	Steps   []Step
}

// Step is one hit of Cost on the vector's counter at Start+At, and the
// verdict expected. The counter is as the earlier steps left it: a
// rejected hit leaves it unchanged, unless it is charged always.
type Step struct {
	At   time.Duration
	Cost int64
	// Always charges the hit with algorithm.ChargeAlways whatever the
	// vector's Limit says, as a request's tollgate.charge entry does.
	Always bool
	Want   algorithm.Verdict
}

// StepLimit returns the limit that applies to step s of v: v.Limit, charged
// always when s.Always.
func (v *Vector) StepLimit(s Step) algorithm.Limit {
	l := v.Limit
	if s.Always {
		l.Charge = algorithm.ChargeAlways
	}
	return l
}

// Vectors returns the test vectors, a fresh copy on every call. Expected
// verdicts were worked out by hand from the formulas documented in package
// algorithm, except those of the two "max_requests_per_year" vectors: their
// products exceed 2^53, so they were computed by a separate implementation
// in IEEE doubles, and they pin down the rounding Lua must share.
func Vectors() []Vector {
	return append([]Vector{
		// Token bucket: 10 per second, so one token is 100 ms of credit.
		{
			Name: "token_bucket/first_hit", Limit: tokenBucket(10, 0, sec), Start: Start,
			Steps: []Step{
				step(0, 1, ok(10, 9, 100*ms)),
			},
		},
		{
			Name: "token_bucket/exhaustion_and_refill", Limit: tokenBucket(10, 0, sec), Start: Start,
			Steps: []Step{
				step(0, 10, ok(10, 0, sec)),
				step(0, 1, no(10, 0, sec, 100*ms)),
				step(50*ms, 1, no(10, 0, 950*ms, 50*ms)),
				step(100*ms, 1, ok(10, 0, sec)),
				// 2.5 tokens of credit: one is spent, the half token is kept.
				step(350*ms, 1, ok(10, 1, 850*ms)),
				step(2*sec, 0, ok(10, 10, 0)),
			},
		},
		{
			Name: "token_bucket/burst", Limit: tokenBucket(2, 3, sec), Start: Start,
			Steps: []Step{
				step(0, 5, ok(5, 0, 2500*ms)),
				step(0, 1, no(5, 0, 2500*ms, 500*ms)),
				step(sec, 2, ok(5, 0, 2500*ms)),
				step(3500*ms, 1, ok(5, 4, 500*ms)),
			},
		},
		{
			// A token is 333333.3 µs: a full bucket still admits exactly 3,
			// and an empty one refills a token in 333334 µs, never sooner.
			Name: "token_bucket/fractional_interval", Limit: tokenBucket(3, 0, sec), Start: Start,
			Steps: []Step{
				step(0, 1, ok(3, 2, 333333*us)),
				step(0, 1, ok(3, 1, 666666*us)),
				step(0, 1, ok(3, 0, sec)),
				step(0, 1, no(3, 0, sec, 333334*us)),
				step(333333*us, 1, no(3, 0, 666667*us, us)),
				step(333334*us, 1, ok(3, 0, sec)),
			},
		},
		{
			Name: "token_bucket/cost_zero", Limit: tokenBucket(2, 0, sec), Start: Start,
			Steps: []Step{
				step(0, 0, ok(2, 2, 0)),
				step(0, 2, ok(2, 0, sec)), // the check consumed nothing
				step(0, 0, no(2, 0, sec, 500*ms)),
				step(500*ms, 0, ok(2, 1, 500*ms)),
			},
		},
		{
			Name: "token_bucket/refund", Limit: tokenBucket(10, 0, sec), Start: Start,
			Steps: []Step{
				step(0, 4, ok(10, 6, 400*ms)),
				step(0, -3, ok(10, 9, 100*ms)),
				step(0, -5, ok(10, 10, 0)), // never above full
				step(0, 10, ok(10, 0, sec)),
				step(0, 1, no(10, 0, sec, 100*ms)),
				step(0, -1000, ok(10, 10, 0)),
				step(0, 10, ok(10, 0, sec)),
			},
		},
		{
			Name: "token_bucket/cost_above_capacity", Limit: tokenBucket(10, 5, sec), Start: Start,
			Steps: []Step{
				step(0, 16, no(15, 15, 0, sec)),
				step(0, 15, ok(15, 0, 1500*ms)),
				step(0, 16, no(15, 0, 1500*ms, sec)),
			},
		},
		{
			Name: "token_bucket/zero_requests", Limit: tokenBucket(0, 0, sec), Start: Start,
			Steps: []Step{
				step(0, 1, no(0, 0, 0, sec)),
				step(0, 0, no(0, 0, 0, sec)),
				step(0, -1, ok(0, 0, 0)),
			},
		},
		{
			// Four tokens per µs: unit-cost hits are charged 1 µs each, so
			// Remaining counts µs of credit; a cost of 1000 is charged 250 µs.
			Name: "token_bucket/high_rate", Limit: tokenBucket(4_000_000, 0, sec), Start: Start,
			Steps: []Step{
				step(0, 1, ok(4_000_000, 999_999, us)),
				step(0, 1000, ok(4_000_000, 999_749, 251*us)),
				step(0, 4_000_000, no(4_000_000, 999_749, 251*us, 251*us)),
				step(251*us, 4_000_000, ok(4_000_000, 0, sec)),
			},
		},
		{
			Name: "token_bucket/max_requests_per_year", Limit: tokenBucket(algorithm.MaxRequests, 0, year), Start: Start,
			Steps: []Step{
				step(0, 1, ok(algorithm.MaxRequests, 4294967294, 7342*us)),
				step(0, 1<<31, ok(algorithm.MaxRequests, 2147483646, 15768000011013*us)),
				step(sec, 0, ok(algorithm.MaxRequests, 2147483782, 15767999011013*us)),
				step(sec, 1<<31+200, no(algorithm.MaxRequests, 2147483782, 15767999011013*us, 483194*us)),
				step(sec, 1<<31, ok(algorithm.MaxRequests, 134, 31535999014684*us)),
			},
		},

		// Fixed window.
		{
			Name: "fixed_window/first_hit_and_exhaustion", Limit: fixedWindow(3, sec), Start: Start + 250_000,
			Steps: []Step{
				step(0, 1, ok(3, 2, 750*ms)),
				step(0, 2, ok(3, 0, 750*ms)),
				step(0, 1, no(3, 0, 750*ms, 750*ms)),
				step(749999*us, 1, no(3, 0, us, us)),
				step(750*ms, 1, ok(3, 2, sec)), // the next window
			},
		},
		{
			// The window holding start began 40 s earlier, not at the first hit.
			Name: "fixed_window/epoch_alignment", Limit: fixedWindow(5, minute), Start: Start,
			Steps: []Step{
				step(0, 1, ok(5, 4, 20*sec)),
				step(20*sec-us, 4, ok(5, 0, us)),
				step(20*sec-us, 1, no(5, 0, us, us)),
				step(20*sec, 1, ok(5, 4, minute)),
			},
		},
		{
			// 2 per 5 minutes: start is 100 s into its window. One-minute
			// windows would have admitted the hit at 100 s.
			Name: "fixed_window/unit_multiplier", Limit: fixedWindow(2, 5*minute), Start: Start,
			Steps: []Step{
				step(0, 2, ok(2, 0, 200*sec)),
				step(100*sec, 1, no(2, 0, 100*sec, 100*sec)),
				step(200*sec, 1, ok(2, 1, 5*minute)),
			},
		},
		{
			Name: "fixed_window/cost_zero_and_refund", Limit: fixedWindow(3, sec), Start: Start,
			Steps: []Step{
				step(0, 0, ok(3, 3, 0)),
				step(0, 3, ok(3, 0, sec)),
				step(0, 0, no(3, 0, sec, sec)),
				step(400*ms, -2, ok(3, 2, 600*ms)),
				step(400*ms, -5, ok(3, 3, 0)), // never below empty
				step(400*ms, 3, ok(3, 0, 600*ms)),
				step(400*ms, 1, no(3, 0, 600*ms, 600*ms)),
			},
		},
		{
			Name: "fixed_window/cost_above_limit", Limit: fixedWindow(3, sec), Start: Start,
			Steps: []Step{
				step(0, 4, no(3, 3, 0, sec)),
				step(0, 3, ok(3, 0, sec)),
			},
		},
		{
			Name: "fixed_window/zero_requests", Limit: fixedWindow(0, sec), Start: Start,
			Steps: []Step{
				step(0, 1, no(0, 0, 0, sec)),
				step(0, 0, no(0, 0, 0, sec)),
				step(0, -1, ok(0, 0, 0)),
			},
		},

		// Sliding-window counter.
		{
			Name: "sliding_window_counter/weighted", Limit: slidingCounter(10, sec), Start: Start,
			Steps: []Step{
				step(0, 10, ok(10, 0, 2*sec)),
				// Next window, once 10·(1s−e)/1s ≤ 9: e = 100 ms.
				step(0, 1, no(10, 0, 2*sec, 1100*ms)),
				// ⌈10·0.9⌉ = 9 of the previous window still weigh.
				step(1100*ms, 1, ok(10, 0, 1900*ms)),
				step(1100*ms, 1, no(10, 0, 1900*ms, 100*ms)),
				step(1200*ms, 1, ok(10, 0, 1800*ms)),
				// ⌈10·0.45⌉ + 2 = 7.
				step(1550*ms, 0, ok(10, 3, 1450*ms)),
				// The window of 2 is now the previous one: ⌈2·0.5⌉ = 1.
				step(2500*ms, 0, ok(10, 9, 500*ms)),
				step(3*sec, 0, ok(10, 10, 0)),
			},
		},
		{
			Name: "sliding_window_counter/epoch_alignment", Limit: slidingCounter(4, minute), Start: Start,
			Steps: []Step{
				step(0, 4, ok(4, 0, 80*sec)),
				// A new window at 20 s; 4·(60−e)/60 ≤ 3 from e = 15 s.
				step(20*sec, 1, no(4, 0, minute, 15*sec)),
				step(35*sec, 1, ok(4, 0, 105*sec)),
			},
		},
		{
			Name: "sliding_window_counter/refund", Limit: slidingCounter(10, sec), Start: Start,
			Steps: []Step{
				step(0, 6, ok(10, 4, 2*sec)),
				step(sec, 3, ok(10, 1, 2*sec)),
				// 3 from the current window, 2 from the previous.
				step(sec, -5, ok(10, 6, sec)),
				step(sec, -10, ok(10, 10, 0)),
				step(sec, 10, ok(10, 0, 2*sec)),
			},
		},
		{
			Name: "sliding_window_counter/cost_above_limit", Limit: slidingCounter(10, sec), Start: Start,
			Steps: []Step{
				step(0, 11, no(10, 10, 0, sec)),
				step(0, 10, ok(10, 0, 2*sec)),
			},
		},
		{
			Name: "sliding_window_counter/zero_requests", Limit: slidingCounter(0, sec), Start: Start,
			Steps: []Step{
				step(0, 1, no(0, 0, 0, sec)),
				step(0, 0, no(0, 0, 0, sec)),
				step(0, -1, ok(0, 0, 0)),
			},
		},
		{
			Name: "sliding_window_counter/max_requests_per_year", Limit: slidingCounter(algorithm.MaxRequests, year), Start: Start,
			Steps: []Step{
				step(0, algorithm.MaxRequests, ok(algorithm.MaxRequests, 0, 47552000*sec)),
				// A year later the full window is the previous one.
				step(year, 0, ok(algorithm.MaxRequests, 2113707902, 16016000*sec)),
				step(year, 2113707903, no(algorithm.MaxRequests, 2113707902, 16016000*sec, 2470*us)),
				step(year, 2113707902, ok(algorithm.MaxRequests, 0, 47552000*sec)),
			},
		},

		// Sliding-window log.
		{
			Name: "sliding_window_log/exact", Limit: slidingLog(3, sec), Start: Start,
			Steps: []Step{
				step(0, 1, ok(3, 2, sec)),
				step(400*ms, 2, ok(3, 0, sec)),
				step(600*ms, 1, no(3, 0, 800*ms, 400*ms)),
				step(sec, 1, ok(3, 0, sec)), // the entry at 0 has left
				step(sec, 2, no(3, 0, sec, 400*ms)),
				step(1400*ms, 2, ok(3, 0, sec)),
				step(2400*ms, 0, ok(3, 3, 0)),
			},
		},
		{
			Name: "sliding_window_log/cost_zero_and_refund", Limit: slidingLog(3, sec), Start: Start,
			Steps: []Step{
				step(0, 0, ok(3, 3, 0)),
				step(0, 1, ok(3, 2, sec)),
				step(100*ms, 2, ok(3, 0, sec)),
				step(100*ms, 0, no(3, 0, sec, 900*ms)),
				step(200*ms, -1, ok(3, 1, 900*ms)), // the newest entry goes
				step(200*ms, 2, no(3, 1, 900*ms, 800*ms)),
				step(200*ms, -5, ok(3, 3, 0)),
				step(200*ms, 3, ok(3, 0, sec)),
			},
		},
		{
			Name: "sliding_window_log/cost_above_limit", Limit: slidingLog(3, sec), Start: Start,
			Steps: []Step{
				step(0, 4, no(3, 3, 0, sec)),
				step(0, 3, ok(3, 0, sec)),
			},
		},
		{
			Name: "sliding_window_log/zero_requests", Limit: slidingLog(0, sec), Start: Start,
			Steps: []Step{
				step(0, 1, no(0, 0, 0, sec)),
				step(0, 0, no(0, 0, 0, sec)),
				step(0, -1, ok(0, 0, 0)),
			},
		},

		// Limits that fail Validate. Configuration never builds one, but a
		// store handed one must neither fail nor panic, and every store
		// answers alike: a limit Apply cannot evaluate (an unknown Kind, a
		// Period of 0 or less, a negative Requests, a sliding-window log
		// longer than MaxLogRequests) rejects every hit, refunds too, with
		// a zero Verdict; the others are evaluated by the formulas, which
		// ignore a Burst where the algorithm has none and treat a negative
		// Burst as 0.
		unevaluated("invalid/zero_period", fixedWindow(3, 0)),
		unevaluated("invalid/negative_period", tokenBucket(3, 0, -sec)),
		unevaluated("invalid/negative_requests", slidingCounter(-1, sec)),
		unevaluated("invalid/no_algorithm", algorithm.Limit{Requests: 3, Period: sec.Microseconds()}),
		unevaluated("invalid/unknown_algorithm", algorithm.Limit{Kind: algorithm.SlidingWindowLog + 1, Requests: 3, Period: sec.Microseconds()}),
		unevaluated("invalid/log_over_max_requests", slidingLog(algorithm.MaxLogRequests+1, sec)),
		{
			Name: "invalid/burst_on_fixed_window", Limit: withBurst(fixedWindow(2, sec), 5), Start: Start,
			Steps: []Step{
				step(0, 2, ok(2, 0, sec)),
				step(0, 1, no(2, 0, sec, sec)),
			},
		},
		{
			// The next window opens at 1 s; 2·(1s−e)/1s ≤ 1 from e = 500 ms.
			Name: "invalid/burst_on_sliding_window_counter", Limit: withBurst(slidingCounter(2, sec), 1), Start: Start,
			Steps: []Step{
				step(0, 2, ok(2, 0, 2*sec)),
				step(0, 1, no(2, 0, 2*sec, 1500*ms)),
			},
		},
		{
			Name: "invalid/burst_on_sliding_window_log", Limit: withBurst(slidingLog(2, sec), 3), Start: Start,
			Steps: []Step{
				step(0, 2, ok(2, 0, sec)),
				step(0, 1, no(2, 0, sec, sec)),
			},
		},
		{
			Name: "invalid/negative_burst", Limit: tokenBucket(2, -3, sec), Start: Start,
			Steps: []Step{
				step(0, 2, ok(2, 0, sec)),
				step(0, 1, no(2, 0, sec, 500*ms)),
			},
		},
		{
			Name: "invalid/requests_over_max", Limit: fixedWindow(algorithm.MaxRequests+1, sec), Start: Start,
			Steps: []Step{
				step(0, 1<<32, ok(1<<32, 0, sec)),
				step(0, 1, no(1<<32, 0, sec, sec)),
			},
		},
		{
			// Windows of 2^50+1 µs: Start lies in the second, which ends at
			// 2·(2^50+1) µs.
			Name: "invalid/period_over_max", Limit: fixedWindow(1, (algorithm.MaxPeriod+1)*us), Start: Start,
			Steps: []Step{
				step(0, 1, ok(1, 0, 501_799_813_685_250*us)),
				step(0, 1, no(1, 0, 501_799_813_685_250*us, 501_799_813_685_250*us)),
			},
		},
		{
			// 2^32 tokens at one per second: 2^32 s to refill from empty,
			// far past MaxPeriod.
			Name: "invalid/bucket_refill_over_max_period", Limit: tokenBucket(1, algorithm.MaxBurst, sec), Start: Start,
			Steps: []Step{
				step(0, 1, ok(1<<32, 1<<32-1, sec)),
				step(0, 1<<32, no(1<<32, 1<<32-1, sec, sec)),
				step(sec, 1<<32, ok(1<<32, 0, 1<<32*sec)),
			},
		},
	}, append(chargeAlwaysVectors(), penaltyVectors()...)...)
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

// chargeAlwaysVectors are the vectors of algorithm.ChargeAlways: counters
// taken past their limit, what each charge answers there, refunds that
// repay, and the caps that keep huge reports from overflowing.
func chargeAlwaysVectors() []Vector {
	const maxDebt = algorithm.MaxDebt * us
	return []Vector{
		// 10 per second: one token is 100 ms of credit.
		{
			Name: "token_bucket/charge_always", Limit: tokenBucket(10, 0, sec), Start: Start,
			Steps: []Step{
				always(0, 4, ok(10, 6, 400*ms)),
				// 6 tokens left: 10 go 4 into debt, repaid in 400 ms.
				always(0, 10, no(10, 0, 1400*ms, 400*ms)),
				// In debt, a check of either charge fails: an admitted one
				// waits for a whole token, an always-charged one for the debt.
				step(100*ms, 0, no(10, 0, 1300*ms, 400*ms)),
				always(100*ms, 0, no(10, 0, 1300*ms, 300*ms)),
				step(100*ms, 1, no(10, 0, 1300*ms, 400*ms)),
				// At exactly zero tokens an always-charged check passes.
				always(400*ms, 0, ok(10, 0, sec)),
				step(400*ms, 0, no(10, 0, sec, 100*ms)),
				step(500*ms, 1, ok(10, 0, sec)),
			},
		},
		{
			Name: "token_bucket/charge_always_refund_in_debt", Limit: tokenBucket(10, 0, sec), Start: Start,
			Steps: []Step{
				always(0, 25, no(10, 0, 2500*ms, 1500*ms)),
				// In debt a refund repays all it carries, beyond the capacity.
				step(0, -20, ok(10, 5, 500*ms)),
				step(0, -20, ok(10, 10, 0)),
			},
		},
		{
			// 900 000 tokens against 100 000 an hour: 8 hours of debt.
			Name: "token_bucket/charge_always_nine_hundred_thousand_tokens", Limit: tokenBucket(100_000, 0, time.Hour), Start: Start,
			Steps: []Step{
				always(0, 900_000, no(100_000, 0, 9*time.Hour, 8*time.Hour)),
				always(0, 0, no(100_000, 0, 9*time.Hour, 8*time.Hour)),
			},
		},
		{
			// 2 000 000 tokens against 100 000 an hour would be 19 hours
			// of debt: it stops at algorithm.DebtPeriods periods, so that
			// one report cannot lock a client out for longer.
			Name: "token_bucket/charge_always_two_million_tokens", Limit: tokenBucket(100_000, 0, time.Hour), Start: Start,
			Steps: []Step{
				always(0, 2_000_000, no(100_000, 0, 11*time.Hour, 10*time.Hour)),
				always(0, 0, no(100_000, 0, 11*time.Hour, 10*time.Hour)),
				// Time repays it: after 10 hours the bucket is empty, no
				// longer in debt.
				always(10*time.Hour, 0, ok(100_000, 0, time.Hour)),
			},
		},
		{
			// The debt stops at ten periods whatever the cost, and a
			// refund repays it.
			Name: "token_bucket/charge_always_max_debt", Limit: tokenBucket(1, 0, sec), Start: Start,
			Steps: []Step{
				always(0, 2_000_000_000, no(1, 0, 11*sec, 10*sec)),
				always(0, 1, no(1, 0, 11*sec, 10*sec)),
				always(0, 1<<62, no(1, 0, 11*sec, 10*sec)),
				step(0, -1, ok(1, 0, 10*sec)),
			},
		},
		{
			// The longest period: ten of them would pass
			// algorithm.MaxDebt, where the debt stops.
			Name: "token_bucket/charge_always_max_debt_longest_period", Limit: tokenBucket(1, 0, algorithm.MaxPeriod*us), Start: Start,
			Steps: []Step{
				always(0, 100, no(1, 0, algorithm.MaxPeriod*us+maxDebt, maxDebt)),
			},
		},
		{
			Name: "token_bucket/charge_always_zero_requests", Limit: tokenBucket(0, 5, sec), Start: Start,
			Steps: []Step{
				always(0, 1, no(5, 0, 0, sec)),
				always(0, 0, no(5, 0, 0, sec)),
			},
		},
		{
			// The window ends 750 ms after the first hit.
			Name: "fixed_window/charge_always", Limit: fixedWindow(3, sec), Start: Start + 250_000,
			Steps: []Step{
				always(0, 2, ok(3, 1, 750*ms)),
				always(0, 5, no(3, 0, 750*ms, 750*ms)),
				always(0, 0, no(3, 0, 750*ms, 750*ms)),
				step(0, -4, ok(3, 0, 750*ms)),
				// At exactly the limit an always-charged check passes; an
				// admitted one asks for room for one more.
				always(0, 0, ok(3, 0, 750*ms)),
				step(0, 0, no(3, 0, 750*ms, 750*ms)),
				always(0, 1, no(3, 0, 750*ms, 750*ms)),
				always(750*ms, 0, ok(3, 3, 0)),
				always(750*ms, 10, no(3, 0, sec, sec)),
				step(750*ms, 1, no(3, 0, sec, sec)),
			},
		},
		{
			Name: "fixed_window/charge_always_saturates", Limit: fixedWindow(algorithm.MaxRequests, sec), Start: Start,
			Steps: []Step{
				always(0, 1<<62, no(algorithm.MaxRequests, 0, sec, sec)),
				always(0, 1<<62, no(algorithm.MaxRequests, 0, sec, sec)),
				// The count stood at exactly MaxCount.
				step(0, -(algorithm.MaxCount - 5), ok(algorithm.MaxRequests, algorithm.MaxRequests-5, sec)),
			},
		},
		{
			Name: "fixed_window/charge_always_zero_requests", Limit: fixedWindow(0, sec), Start: Start,
			Steps: []Step{
				always(0, 1, no(0, 0, 0, sec)),
				always(0, 0, no(0, 0, 0, sec)),
			},
		},
		{
			Name: "sliding_window_counter/charge_always", Limit: slidingCounter(10, sec), Start: Start,
			Steps: []Step{
				always(0, 8, ok(10, 2, 2*sec)),
				// 13 in this window: the next window's estimate
				// ⌈13·(1 s − x)/1 s⌉ is 10 from x = 230 770 µs.
				always(0, 5, no(10, 0, 2*sec, 1_230_770*us)),
				always(500*ms, 0, no(10, 0, 1500*ms, 730_770*us)),
				// Room for one more needs ⌈13·(1 s − x)/1 s⌉ ≤ 9.
				step(500*ms, 1, no(10, 0, 1500*ms, 807_693*us)),
				always(1_230_770*us, 0, ok(10, 0, 769_230*us)),
				// 1 more in the new window: ⌈13·(1 s − x)/1 s⌉ ≤ 9 from
				// x = 307 693 µs.
				always(1_230_770*us, 1, no(10, 0, 1_769_230*us, 76_923*us)),
			},
		},
		{
			Name: "sliding_window_log/charge_always", Limit: slidingLog(3, sec), Start: Start,
			Steps: []Step{
				always(0, 1, ok(3, 2, sec)),
				// 5 more make 6; the log keeps the newest 4, all at 100 ms.
				always(100*ms, 5, no(3, 0, sec, sec)),
				always(500*ms, 0, no(3, 0, 600*ms, 600*ms)),
				step(500*ms, -1, ok(3, 0, 600*ms)),
				always(500*ms, 0, ok(3, 0, 600*ms)),
				step(500*ms, 0, no(3, 0, 600*ms, 600*ms)),
				// A cost above the limit adds Requests+1 entries.
				always(1100*ms, 10, no(3, 0, sec, sec)),
				step(2099*ms, 0, no(3, 0, 1*ms, 1*ms)),
				step(2100*ms, 3, ok(3, 0, sec)),
			},
		},
	}
}

// unevaluated is a vector of a limit that Apply cannot evaluate: a hit, a
// check and a refund, each rejected with a zero Verdict.
func unevaluated(name string, l algorithm.Limit) Vector {
	return Vector{Name: name, Limit: l, Start: Start, Steps: []Step{
		step(0, 1, algorithm.Verdict{}),
		step(0, 0, algorithm.Verdict{}),
		step(0, -1, algorithm.Verdict{}),
	}}
}

// withBurst returns l with a Burst, which Validate allows only on a token
// bucket.
func withBurst(l algorithm.Limit, burst int64) algorithm.Limit {
	l.Burst = burst
	return l
}

// step is a Step.
func step(at time.Duration, cost int64, want algorithm.Verdict) Step {
	return Step{At: at, Cost: cost, Want: want}
}

// always is a Step charged with algorithm.ChargeAlways.
func always(at time.Duration, cost int64, want algorithm.Verdict) Step {
	return Step{At: at, Cost: cost, Always: true, Want: want}
}

// ok is an admitted verdict.
func ok(limit, remaining int64, resetAfter time.Duration) algorithm.Verdict {
	return algorithm.Verdict{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: resetAfter}
}

// pen is the verdict of a hit rejected by a penalty's cooldown.
func pen(limit int64, resetAfter, retryAfter time.Duration) algorithm.Verdict {
	return algorithm.Verdict{Penalized: true, Limit: limit, ResetAfter: resetAfter, RetryAfter: retryAfter}
}

// no is a rejected verdict.
func no(limit, remaining int64, resetAfter, retryAfter time.Duration) algorithm.Verdict {
	return algorithm.Verdict{Limit: limit, Remaining: remaining, ResetAfter: resetAfter, RetryAfter: retryAfter}
}
