package algorithmtest

import (
	"fmt"
	"math"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// Breach checks the instants at which hits of cost 1 were admitted on one
// counter of l, ascending, in µs, against the guarantee of leases
// (algorithm.Reserve): no fixed window holds more than Requests, no
// sliding-window estimate exceeds Requests, and a token bucket admits no
// more than a strict bucket whose capacity has slack µs of refill added
// (a lease's lifetime, and whatever uncertainty the caller has about the
// instants). It returns a description of the first breach, or "".
func Breach(l algorithm.Limit, admitted []int64, slack int64) string {
	window := func(at int64) int64 { return at - at%l.Period }
	count := map[int64]int64{}
	capacity := float64(l.Capacity()) + float64(slack)*float64(l.Requests)/float64(l.Period)
	tokens, last := capacity, int64(0)
	for i, at := range admitted {
		w := window(at)
		count[w]++
		switch l.Kind {
		case algorithm.FixedWindow:
			if count[w] > l.Requests {
				return fmt.Sprintf("%d hits admitted in the window at %d, limit %d", count[w], w, l.Requests)
			}
		case algorithm.SlidingWindowCounter:
			elapsed := at - w
			if e := (count[w-l.Period]*(l.Period-elapsed)+l.Period-1)/l.Period + count[w]; e > l.Requests {
				return fmt.Sprintf("estimate %d at %d, limit %d", e, at, l.Requests)
			}
		case algorithm.TokenBucket:
			if i > 0 {
				tokens = math.Min(capacity, tokens+float64(at-last)*float64(l.Requests)/float64(l.Period))
			}
			last = at
			if tokens < 1-1e-9 {
				return fmt.Sprintf("bucket admitted beyond the strict bound at %d (%.3f tokens)", at, tokens)
			}
			tokens--
		}
	}
	return ""
}
