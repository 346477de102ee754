package main

import (
	"math"
	"time"

	"github.com/tollgatehq/tollgate/pkg/loadgen"
)

// The accuracy of a run is judged from what tollgate bench counted with
// --key-window keyWindow: every key's OK and OVER_LIMIT answers per window
// of send time (see loadgen.KeyCount). Each run sends fresh keys, so every
// counter starts empty (a bucket full) at its key's first hit. A call was
// decided between its send and its answer: the OKs of a window, less
// those answered after it ended, were decided within it.
//
//   - Overage: hits admitted beyond what the strict algorithm could have
//     admitted. A fixed window: per window of the limit, the OKs decided
//     within it beyond the limit. A token bucket of rate r and capacity C
//     admits at most C + r·d in any interval of length d; per key, the
//     largest excess over any run of consecutive key windows. Both count
//     only what was certainly decided within the interval, so a strict
//     run shows none.
//   - False rejections: the rejections of keys under their limit, which
//     the strict algorithm never rejects: every fixed window's demand at
//     most its limit, and every key window's demand at most r·w and
//     (C − r·δ)/2 for a bucket (w the key window, δ the longest call), so
//     that no interval can hold more than C + r·d of the key's hits.
//   - Capacity of saturated clients: what each admitted, as a share of
//     what the strict algorithm admits for its demand, replayed through
//     every limit with each key window's hits evenly spaced between its
//     first and last send. The replay only approximates the arrivals, so
//     the strict run of the same scenario shows how close it comes (a
//     share above 1 is the replay's error; overage is judged above).

// keyWindow is the window of tollgate bench's --key-window.
const keyWindow = time.Second

// keyCount is one key's counts in one window, as tollgate bench
// --key-window reports them.
type keyCount = loadgen.KeyCount

// judgedLimit is one limit of a scenario's rule, as the judge needs it.
type judgedLimit struct {
	fixedWindow bool // else a token bucket
	requests    int64
	period      time.Duration
	burst       int64 // token bucket only
}

// rate returns a token bucket's refill in hits per microsecond.
func (l judgedLimit) rate() float64 { return float64(l.requests) / float64(l.period.Microseconds()) }

// capacity returns a token bucket's capacity C.
func (l judgedLimit) capacity() float64 { return float64(l.requests + l.burst) }

// accuracy is the judge's verdict on one run.
type accuracy struct {
	Decisions       int64   `json:"decisions_counted"`
	OverageHits     int64   `json:"overage_hits"`
	OverageKeys     int     `json:"overage_keys"`
	UnderLimitHits  int64   `json:"under_limit_hits"`
	FalseRejections int64   `json:"false_rejections"`
	FalseShare      float64 `json:"false_rejection_share"`
	// Saturated holds the designated saturated clients, when the
	// scenario has some.
	Saturated   []clientCapacity `json:"saturated_clients,omitempty"`
	CapacityMin float64          `json:"capacity_min,omitempty"`
}

// clientCapacity is one saturated client's admissions against what the
// strict algorithm admits for its demand.
type clientCapacity struct {
	Key          uint64  `json:"key"`
	Demand       int64   `json:"demand"`
	Admitted     int64   `json:"admitted"`
	StrictAdmits int64   `json:"strict_admits"`
	Share        float64 `json:"share"`
}

// byKey splits sorted counts into each key's windows.
func byKey(counts []keyCount) [][]keyCount {
	var out [][]keyCount
	for i := 0; i < len(counts); {
		j := i
		for j < len(counts) && counts[j].Key == counts[i].Key {
			j++
		}
		out = append(out, counts[i:j])
		i = j
	}
	return out
}

// judge judges the counts of a run (sorted, one key window long each)
// against limits, for overage and false rejections; delta is the longest
// call of the load that sent them.
func judge(counts []keyCount, limits []judgedLimit, delta time.Duration) accuracy {
	var a accuracy
	d := delta.Microseconds()
	for _, windows := range byKey(counts) {
		over := int64(0)
		for _, l := range limits {
			over += overage(windows, l)
		}
		if over > 0 {
			a.OverageHits += over
			a.OverageKeys++
		}
		var demand, rejected int64
		for _, w := range windows {
			demand += w.OK + w.OverLimit
			rejected += w.OverLimit
		}
		a.Decisions += demand
		if underLimit(windows, limits, d) {
			a.UnderLimitHits += demand
			a.FalseRejections += rejected
		}
	}
	a.share()
	return a
}

// share computes FalseShare.
func (a *accuracy) share() {
	a.FalseShare = 0
	if a.UnderLimitHits > 0 {
		a.FalseShare = float64(a.FalseRejections) / float64(a.UnderLimitHits)
	}
}

// add adds the overage and false rejections of b, judged on other keys.
func (a *accuracy) add(b accuracy) {
	a.Decisions += b.Decisions
	a.OverageHits += b.OverageHits
	a.OverageKeys += b.OverageKeys
	a.UnderLimitHits += b.UnderLimitHits
	a.FalseRejections += b.FalseRejections
	a.share()
}

// addSaturated adds a saturated client's capacity.
func (a *accuracy) addSaturated(c clientCapacity) {
	a.Saturated = append(a.Saturated, c)
	if len(a.Saturated) == 1 || c.Share < a.CapacityMin {
		a.CapacityMin = c.Share
	}
}

// overage returns the hits of one key's windows admitted beyond what l
// allows (see the top of this file).
func overage(windows []keyCount, l judgedLimit) int64 {
	w := keyWindow.Microseconds()
	if l.fixedWindow {
		p := l.period.Microseconds()
		decided := map[int64]int64{}
		for _, kc := range windows {
			start := kc.Start - kc.Start%p
			decided[start] += kc.OK
			if kc.Start+w >= start+p { // the last key window of the limit's
				decided[start] -= kc.OKLate
			}
		}
		var over int64
		for _, n := range decided {
			over += max(0, n-l.requests)
		}
		return over
	}
	// The largest sum over consecutive key windows i..j of (OK − r·w),
	// empty windows counting −r·w each, less window j's late OKs and C.
	rw := l.rate() * float64(w)
	best, worst := math.Inf(-1), math.Inf(-1)
	for i, kc := range windows {
		x := float64(kc.OK) - rw
		if i > 0 {
			gap := float64((kc.Start - windows[i-1].Start) / w) // windows since the last
			best = max(x, best-(gap-1)*rw+x)
		} else {
			best = x
		}
		worst = max(worst, best-float64(kc.OKLate)-l.capacity())
	}
	if worst <= 0 {
		return 0
	}
	return int64(math.Ceil(worst - 1e-9))
}

// underLimit reports whether the strict algorithm would have admitted
// every hit of one key's windows under every limit (see the top of this
// file); d is the longest call, in microseconds.
func underLimit(windows []keyCount, limits []judgedLimit, d int64) bool {
	w := keyWindow.Microseconds()
	for _, l := range limits {
		if l.fixedWindow {
			p := l.period.Microseconds()
			demand := map[int64]int64{}
			for _, kc := range windows {
				demand[kc.Start-kc.Start%p] += kc.OK + kc.OverLimit
			}
			for _, n := range demand {
				if n > l.requests {
					return false
				}
			}
			continue
		}
		most := min(l.rate()*float64(w), (l.capacity()-l.rate()*float64(d))/2)
		for _, kc := range windows {
			if float64(kc.OK+kc.OverLimit) > most {
				return false
			}
		}
	}
	return true
}

// capacity judges one saturated client's windows (see the top of this
// file): what it admitted against what the strict algorithm admits for its
// demand, replayed with each window's hits evenly spaced from its first
// send to its last.
func capacity(windows []keyCount, limits []judgedLimit) clientCapacity {
	c := clientCapacity{Key: windows[0].Key}
	tokens := make([]float64, len(limits)) // token buckets: tokens left
	at := make([]int64, len(limits))       // token buckets: time of tokens
	used := map[[2]int64]int64{}           // fixed windows: (limit, window) → hits
	for i, l := range limits {
		tokens[i], at[i] = l.capacity(), windows[0].First
	}
	admit := func(t int64) bool {
		for i, l := range limits {
			if l.fixedWindow {
				p := l.period.Microseconds()
				if used[[2]int64{int64(i), t - t%p}] >= l.requests {
					return false
				}
				continue
			}
			if min(l.capacity(), tokens[i]+l.rate()*float64(t-at[i])) < 1 {
				return false
			}
		}
		for i, l := range limits {
			if l.fixedWindow {
				used[[2]int64{int64(i), t - t%l.period.Microseconds()}]++
				continue
			}
			tokens[i], at[i] = min(l.capacity(), tokens[i]+l.rate()*float64(t-at[i]))-1, t
		}
		return true
	}
	for _, kc := range windows {
		n := kc.OK + kc.OverLimit
		c.Demand += n
		c.Admitted += kc.OK
		for j := range n {
			t := kc.First
			if n > 1 {
				t += (kc.Last - kc.First) * j / (n - 1)
			}
			if admit(t) {
				c.StrictAdmits++
			}
		}
	}
	if c.StrictAdmits > 0 {
		c.Share = float64(c.Admitted) / float64(c.StrictAdmits)
	}
	return c
}

// worstAccuracy returns the worst of several runs' verdicts: the most
// overage, the largest share of false rejections, the least capacity.
func worstAccuracy(runs []accuracy) accuracy {
	var w accuracy
	for i, a := range runs {
		if i == 0 {
			w = a
			continue
		}
		if a.OverageHits > w.OverageHits {
			w.OverageHits, w.OverageKeys = a.OverageHits, a.OverageKeys
		}
		if a.FalseShare > w.FalseShare {
			w.FalseShare, w.FalseRejections, w.UnderLimitHits = a.FalseShare, a.FalseRejections, a.UnderLimitHits
		}
		if len(a.Saturated) > 0 && a.CapacityMin < w.CapacityMin {
			w.Saturated, w.CapacityMin = a.Saturated, a.CapacityMin
		}
		w.Decisions = max(w.Decisions, a.Decisions)
	}
	return w
}
