package algorithmtest

import (
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// penalty returns a Penalty of the given tolerance, factor and durations.
func penalty(tolerance int64, cooldown time.Duration, factor int64, maxCooldown, forgiveAfter time.Duration) *algorithm.Penalty {
	return &algorithm.Penalty{
		Tolerance:    tolerance,
		Cooldown:     cooldown.Microseconds(),
		Factor:       factor,
		Max:          maxCooldown.Microseconds(),
		ForgiveAfter: forgiveAfter.Microseconds(),
	}
}

// penaltyVectors are the vectors of algorithm.ApplyPenalty: strikes counted
// while a Retry-After runs, honest retries that start the count again,
// cooldowns that escalate by the factor up to the maximum, hits sent
// through a cooldown, the hits a penalty does not cover, and forgiveness.
func penaltyVectors() []Vector {
	return []Vector{
		{
			// 10 per second: one token is 100 ms of credit. One strike is
			// tolerated; cooldowns of 1 s, 2 s, then at most 3 s.
			Name: "token_bucket/penalty_escalation", Limit: tokenBucket(10, 0, sec), Start: Start,
			Penalty: penalty(1, sec, 2, 3*sec, 10*sec),
			Steps: []Step{
				step(0, 10, ok(10, 0, sec)),
				// The first rejection tells the client to wait 100 ms.
				step(0, 1, no(10, 0, sec, 100*ms)),
				step(10*ms, 1, no(10, 0, 990*ms, 90*ms)), // strike 1, tolerated
				step(20*ms, 1, pen(10, sec, sec)),        // strike 2: a 1 s cooldown
				// Blocked: the bucket holds 5 tokens, untouched. A strike.
				step(500*ms, 1, pen(10, 520*ms, 520*ms)),
				step(1020*ms, 1, ok(10, 9, 100*ms)), // the cooldown is over
				step(1020*ms, 9, ok(10, 0, sec)),
				// At or after the end of the last wait: the count starts again.
				step(1020*ms, 1, no(10, 0, sec, 100*ms)),
				step(1030*ms, 1, no(10, 0, 990*ms, 90*ms)),
				step(1040*ms, 1, pen(10, 2*sec, 2*sec)), // the second cooldown is twice the first
				// Sending through the cooldown earns the next one, capped
				// at 3 s, from that instant.
				step(1050*ms, 1, pen(10, 1990*ms, 1990*ms)),
				step(1060*ms, 1, pen(10, 3*sec, 3*sec)),
				step(4059*ms, 0, pen(10, ms, ms)),
				// 10 s after the cooldown's end the client is forgiven: the
				// next cooldown is 1 s again.
				step(14060*ms, 10, ok(10, 0, sec)),
				step(14060*ms, 1, no(10, 0, sec, 100*ms)),
				step(14070*ms, 1, no(10, 0, 990*ms, 90*ms)),
				step(14080*ms, 1, pen(10, sec, sec)),
			},
		},
		{
			// The window ends 750 ms after the first step. No strike is
			// tolerated; cooldowns of 5 s, then 15 s.
			Name: "fixed_window/penalty_honest_retries", Limit: fixedWindow(2, sec), Start: Start + 250_000,
			Penalty: penalty(0, 5*sec, 3, time.Minute, time.Minute),
			Steps: []Step{
				step(0, 2, ok(2, 0, 750*ms)),
				step(0, 1, no(2, 0, 750*ms, 750*ms)),
				// Retrying exactly when told is no strike.
				step(750*ms, 1, ok(2, 1, sec)),
				step(750*ms, 1, ok(2, 0, sec)),
				step(750*ms, 1, no(2, 0, sec, sec)),
				step(1750*ms, 0, ok(2, 2, 0)),
				step(1750*ms, 2, ok(2, 0, sec)),
				step(1750*ms, 1, no(2, 0, sec, sec)),
				// 50 ms into a wait of a second: the first strike.
				step(1800*ms, 1, pen(2, 5*sec, 5*sec)),
				// A cost above the capacity is blocked, but no strike.
				step(2000*ms, 3, pen(2, 4800*ms, 4800*ms)),
				// A refund is never blocked.
				step(2000*ms, -1, ok(2, 1, 750*ms)),
				step(6800*ms, 1, ok(2, 1, 950*ms)),
				step(6800*ms, 1, ok(2, 0, 950*ms)),
				step(6800*ms, 1, no(2, 0, 950*ms, 950*ms)),
				// Not forgiven yet: the next cooldown is 3 × 5 s.
				step(6900*ms, 1, pen(2, 15*sec, 15*sec)),
			},
		},
		{
			// The window ends 20 s after the first step. A client goes by
			// the last Retry-After it was given: the cooldown's 5 s, though
			// the window had 19 s to run.
			Name: "fixed_window/penalty_latest_retry_after", Limit: fixedWindow(2, minute), Start: Start,
			Penalty: penalty(0, 5*sec, 2, minute, time.Hour),
			Steps: []Step{
				step(0, 2, ok(2, 0, 20*sec)),
				step(0, 1, no(2, 0, 20*sec, 20*sec)),
				step(sec, 1, pen(2, 19*sec, 5*sec)),
				step(6*sec, 1, no(2, 0, 14*sec, 14*sec)),
				step(7*sec, 1, pen(2, 13*sec, 10*sec)),
			},
		},
		{
			// No strike is tolerated; cooldowns of 2 s, then 4 s, forgiven
			// after 1 s.
			Name: "sliding_window_log/penalty_always_charged_and_forgiven", Limit: slidingLog(1, sec), Start: Start,
			Penalty: penalty(0, 2*sec, 2, 4*sec, sec),
			Steps: []Step{
				step(0, 1, ok(1, 0, sec)),
				step(0, 1, no(1, 0, sec, sec)),
				// An always-charged hit is neither counted nor blocked.
				always(0, 0, ok(1, 0, sec)),
				step(100*ms, 1, pen(1, 2*sec, 2*sec)),
				always(200*ms, 1, no(1, 0, sec, 800*ms)),
				step(2100*ms, 1, ok(1, 0, sec)),
				// A second after the cooldown's end, forgiven: 2 s again,
				// not 4 s.
				step(3100*ms, 1, ok(1, 0, sec)),
				step(3100*ms, 1, no(1, 0, sec, sec)),
				step(3200*ms, 1, pen(1, 2*sec, 2*sec)),
			},
		},
	}
}
