package algorithm_test

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

const t0 = 1_750_000_000_000_000 // µs

func limit(kind algorithm.Kind, requests, burst, period int64) algorithm.Limit {
	return algorithm.Limit{Kind: kind, Requests: requests, Burst: burst, Period: period}
}

// propertyLimits span the regimes: whole and fractional token intervals,
// more than one token per µs, tiny periods, and every algorithm.
var propertyLimits = []algorithm.Limit{
	limit(algorithm.TokenBucket, 10, 0, 1e6),
	limit(algorithm.TokenBucket, 3, 0, 1e6),
	limit(algorithm.TokenBucket, 2, 3, 1e6),
	limit(algorithm.TokenBucket, 7, 2, 13),
	limit(algorithm.TokenBucket, 4_000_000, 0, 1e6),
	limit(algorithm.TokenBucket, 40, 25, 3),
	limit(algorithm.FixedWindow, 3, 0, 1e6),
	limit(algorithm.FixedWindow, 5, 0, 7),
	limit(algorithm.SlidingWindowCounter, 10, 0, 1e6),
	limit(algorithm.SlidingWindowCounter, 3, 0, 10),
	limit(algorithm.SlidingWindowCounter, 7, 0, 9),
	limit(algorithm.SlidingWindowLog, 3, 0, 1e6),
	limit(algorithm.SlidingWindowLog, 5, 0, 10),
}

// TestApplyProperties drives every algorithm with random hits and checks
// the documented meaning of each Verdict field against later decisions:
// Remaining unit hits really are admissible, RetryAfter is the exact
// earliest admission, Expiry makes a state equivalent to a fresh one, and
// rejected hits and checks leave the state alone.
func TestApplyProperties(t *testing.T) {
	for _, l := range propertyLimits {
		t.Run(describe(l), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(l.Requests), uint64(l.Period)))
			var s algorithm.State
			now := int64(t0)
			for range 3000 {
				now += rng.Int64N(l.Period/2 + 2)
				cost := rng.Int64N(l.Capacity()+5) - 3
				l.Charge = algorithm.ChargeAdmitted
				if rng.IntN(3) == 0 {
					l.Charge = algorithm.ChargeAlways
					cost = rng.Int64N(2*l.Capacity()+5) - 3
				}
				s = checkStep(t, l, s, now, cost)
			}
		})
	}
}

// FuzzApply checks the same properties on states reached by fuzzed hits.
func FuzzApply(f *testing.F) {
	f.Add(uint8(1), int64(3), int64(1), int64(1e6), []byte{1, 5, 2, 200, 0, 9, 3, 255})
	f.Add(uint8(2), int64(4), int64(0), int64(60e6), []byte{4, 0, 1, 100, 2, 7})
	f.Add(uint8(3), int64(5), int64(0), int64(10), []byte{3, 1, 3, 1, 9, 9, 2})
	f.Add(uint8(4), int64(3), int64(0), int64(1e6), []byte{1, 1, 1, 1, 0, 250, 6})
	f.Fuzz(func(t *testing.T, kind uint8, requests, burst, period int64, steps []byte) {
		l := limit(algorithm.Kind(kind%5), requests%1000, burst%100, period)
		if l.Kind != algorithm.TokenBucket {
			l.Burst = 0
		}
		if l.Validate() != nil || len(steps) > 200 {
			t.Skip()
		}
		var s algorithm.State
		now := int64(t0)
		for i := 0; i+1 < len(steps); i += 2 {
			now += int64(steps[i]) * max(l.Period/64, 1)
			l.Charge = algorithm.Charge(steps[i+1] >> 7)
			cost := int64(steps[i+1]&0x7f)%(2*l.Capacity()+4) - 2
			s = checkStep(t, l, s, now, cost)
		}
	})
}

// checkStep checks the verdict and state of one hit against the documented
// properties and returns the state after it.
func checkStep(t *testing.T, l algorithm.Limit, s algorithm.State, now, cost int64) algorithm.State {
	t.Helper()
	always := l.Charge == algorithm.ChargeAlways
	admitted := l
	admitted.Charge = algorithm.ChargeAdmitted
	logBefore := slices.Clone(s.Log)
	next, v := algorithm.Apply(l, s, now, cost)
	where := func() string {
		return describe(l) + " at +" + time.Duration((now-t0)*1000).String() + " cost " + itoa(cost)
	}
	if !slices.Equal(s.Log, logBefore) {
		t.Fatalf("%s: Apply changed the caller's log from %v to %v", where(), logBefore, s.Log)
	}
	if v.Limit != l.Capacity() || v.Remaining < 0 || v.Remaining > l.Capacity() {
		t.Fatalf("%s: %+v: Limit or Remaining out of range", where(), v)
	}
	if !slices.IsSorted(next.Log) {
		t.Fatalf("%s: log out of order: %v", where(), next.Log)
	}
	if cost < 0 && !v.Allowed {
		t.Fatalf("%s: refund rejected: %+v", where(), v)
	}
	charged := cost != 0 && (v.Allowed || always && l.Requests > 0)
	if !charged && !sameState(next, s) {
		t.Fatalf("%s: %+v changed the state from %+v to %+v", where(), v, s, next)
	}
	if v.Allowed && v.RetryAfter != 0 {
		t.Fatalf("%s: admitted with RetryAfter %v", where(), v.RetryAfter)
	}
	after := s
	if charged {
		after = next
	}
	if always && !v.Allowed && cost > 0 && l.Requests > 0 && v.Remaining != 0 {
		t.Fatalf("%s: charged past the limit with Remaining %d", where(), v.Remaining)
	}

	// Remaining counts the unit-cost hits admissible now, one after another.
	if v.Remaining <= 64 {
		st := after
		for i := range v.Remaining {
			var u algorithm.Verdict
			if st, u = algorithm.Apply(admitted, st, now, 1); !u.Allowed {
				t.Fatalf("%s: Remaining %d, but unit hit %d was rejected", where(), v.Remaining, i+1)
			}
		}
		if _, u := algorithm.Apply(admitted, st, now, 1); u.Allowed {
			t.Fatalf("%s: Remaining %d, but unit hit %d was admitted", where(), v.Remaining, v.Remaining+1)
		}
	}

	// RetryAfter is the exact earliest time the same hit is admitted, or,
	// for a hit charged past the limit, the counter is back at its limit:
	// an always-charged check passes.
	if !v.Allowed && l.Requests > 0 && (always || cost <= l.Capacity()) {
		base, c := s, cost
		if charged {
			base, c = after, 0
		}
		retry := v.RetryAfter.Microseconds()
		if retry <= 0 {
			t.Fatalf("%s: rejected with RetryAfter %v", where(), v.RetryAfter)
		}
		if _, u := algorithm.Apply(l, base, now+retry-1, c); u.Allowed {
			t.Fatalf("%s: RetryAfter %v, but admitted 1µs earlier", where(), v.RetryAfter)
		}
		if _, u := algorithm.Apply(l, base, now+retry, c); !u.Allowed {
			t.Fatalf("%s: RetryAfter %v, but rejected then: %+v", where(), v.RetryAfter, u)
		}
	}

	// ResetAfter is the time until the counter is full, which is its Expiry.
	exp := l.Expiry(after)
	if got, want := v.ResetAfter.Microseconds(), max(0, exp-now); got != want {
		t.Fatalf("%s: ResetAfter %dµs, Expiry-now %dµs", where(), got, want)
	}
	for _, at := range []int64{max(exp, now), max(exp, now) + 1, max(exp, now) + l.Period} {
		for _, c := range []int64{1, 0, -1, l.Capacity()} {
			gotS, gotV := algorithm.Apply(l, after, at, c)
			wantS, wantV := algorithm.Apply(l, algorithm.State{}, at, c)
			// Checks and rejections return their input state unchanged, so
			// only the states of charged hits are compared.
			charged := c != 0 && (gotV.Allowed || always && l.Requests > 0)
			if gotV != wantV || charged && !sameState(gotS, wantS) {
				t.Fatalf("%s: past Expiry %d, cost %d at %d gives %+v %+v, a fresh key %+v %+v",
					where(), exp, c, at, gotV, gotS, wantV, wantS)
			}
		}
	}
	return after
}

func sameState(a, b algorithm.State) bool {
	return a.T == b.T && a.Cur == b.Cur && a.Prev == b.Prev && slices.Equal(a.Log, b.Log)
}

func describe(l algorithm.Limit) string {
	return l.Kind.String() + "_" + itoa(l.Requests) + "+" + itoa(l.Burst) + "_per_" + itoa(l.Period) + "us"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestApplyKeepsCallerLog checks that Apply never writes to the caller's
// log, even when it appends into spare capacity and the caller then uses
// the old state again, as a store does after rolling back a batch.
func TestApplyKeepsCallerLog(t *testing.T) {
	l := limit(algorithm.SlidingWindowLog, 4, 0, 1e6)
	backing := make([]int64, 2, 16)
	backing[0], backing[1] = t0, t0+10
	s := algorithm.State{Log: backing}

	tests := []struct {
		name string
		now  int64
		cost int64
	}{
		{"admitted append", t0 + 20, 2},
		{"admitted before the newest entry", t0 + 5, 1},
		{"rejected", t0 + 20, 3},
		{"refund", t0 + 20, -1},
		{"check", t0 + 20, 0},
		{"expired prefix", t0 + 1e6 + 5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, _ := algorithm.Apply(l, s, tt.now, tt.cost)
			if s.Log[0] != t0 || s.Log[1] != t0+10 || len(s.Log) != 2 {
				t.Fatalf("caller's log changed to %v", s.Log)
			}
			// A second Apply on the old state must not see the first.
			again, _ := algorithm.Apply(l, s, tt.now, tt.cost)
			if !slices.Equal(next.Log, again.Log) {
				t.Fatalf("Apply on the same state gave %v, then %v", next.Log, again.Log)
			}
			// Nor may a hit on the new state write into the old one: a batch
			// that is rejected later keeps the old state.
			algorithm.Apply(l, next, tt.now+1, 1)
			if s.Log[0] != t0 || s.Log[1] != t0+10 || len(s.Log) != 2 {
				t.Fatalf("a hit on the new state changed the caller's log to %v", s.Log)
			}
		})
	}
}

// TestApplyInvalidLimit checks that a limit no configuration should produce
// rejects without panicking.
func TestApplyInvalidLimit(t *testing.T) {
	tests := []algorithm.Limit{
		{},
		limit(0, 10, 0, 1e6),
		limit(9, 10, 0, 1e6),
		limit(algorithm.TokenBucket, 10, 0, 0),
		limit(algorithm.FixedWindow, 10, 0, -5),
		limit(algorithm.SlidingWindowCounter, -1, 0, 1e6),
		limit(algorithm.SlidingWindowLog, 10, 0, 0),
		limit(algorithm.SlidingWindowLog, algorithm.MaxLogRequests+1, 0, 1e6),
	}
	for _, l := range tests {
		s := algorithm.State{T: 5, Cur: 1}
		for _, cost := range []int64{-1, 0, 1} {
			next, v := algorithm.Apply(l, s, t0, cost)
			if v != (algorithm.Verdict{}) || !sameState(next, s) {
				t.Errorf("%+v cost %d: got %+v %+v, want a zero verdict and the same state", l, cost, v, next)
			}
		}
	}
}

// TestApplyExtremeCosts checks that costs near the int64 limits neither
// overflow nor panic.
func TestApplyExtremeCosts(t *testing.T) {
	const huge = 1<<63 - 1
	for _, l := range propertyLimits {
		s, _ := algorithm.Apply(l, algorithm.State{}, t0, 1)
		if _, v := algorithm.Apply(l, s, t0, huge); v.Allowed || v.RetryAfter != time.Duration(l.Period)*time.Microsecond {
			t.Errorf("%s: cost %d: %+v, want rejected after one period", describe(l), int64(huge), v)
		}
		empty, v := algorithm.Apply(l, s, t0, -huge-1)
		if !v.Allowed || v.Remaining == 0 {
			t.Errorf("%s: refund of -2^63: %+v, want admitted and a full counter", describe(l), v)
		}
		if exp := l.Expiry(empty); exp > t0 {
			t.Errorf("%s: refund of -2^63 left a counter expiring at %d", describe(l), exp)
		}
	}
}

// TestApplyChargeAlwaysSaturates checks that always-charged costs near the
// int64 limit take a counter to its cap, never past 2^53, and keep it
// there.
func TestApplyChargeAlwaysSaturates(t *testing.T) {
	const huge = 1<<63 - 1
	for _, l := range propertyLimits {
		l.Charge = algorithm.ChargeAlways
		var s algorithm.State
		for i := range 3 {
			next, v := algorithm.Apply(l, s, t0, huge)
			if v.Allowed || v.Remaining != 0 {
				t.Fatalf("%s: cost %d: %+v, want rejected with nothing remaining", describe(l), int64(huge), v)
			}
			if exp := l.Expiry(next); exp >= 1<<53 || exp <= t0 {
				t.Fatalf("%s: after %d huge costs the counter expires at %d", describe(l), i+1, exp)
			}
			if next.Cur > algorithm.MaxCount || int64(len(next.Log)) > l.Requests+1 {
				t.Fatalf("%s: after %d huge costs the state is %+v", describe(l), i+1, next)
			}
			if i > 0 && !sameState(next, s) {
				t.Fatalf("%s: a saturated counter changed from %+v to %+v", describe(l), s, next)
			}
			s = next
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		limit algorithm.Limit
		want  string // substring of the error, "" for valid
	}{
		{"token bucket", limit(algorithm.TokenBucket, 10, 20, 1e6), ""},
		{"token bucket at the bounds", limit(algorithm.TokenBucket, algorithm.MaxRequests, algorithm.MaxBurst, 1<<49), ""},
		{"fixed window of a year", limit(algorithm.FixedWindow, algorithm.MaxRequests, 0, 31_536_000e6), ""},
		{"requests zero", limit(algorithm.SlidingWindowCounter, 0, 0, 1e6), ""},
		{"log at its bound", limit(algorithm.SlidingWindowLog, algorithm.MaxLogRequests, 0, 1e6), ""},
		{"kind zero", limit(0, 1, 0, 1e6), "unknown algorithm algorithm(0)"},
		{"kind unknown", limit(5, 1, 0, 1e6), "unknown algorithm algorithm(5)"},
		{"period zero", limit(algorithm.FixedWindow, 1, 0, 0), "period 0µs outside"},
		{"period too long", limit(algorithm.FixedWindow, 1, 0, algorithm.MaxPeriod+1), "period 1125899906842625µs outside"},
		{"requests negative", limit(algorithm.FixedWindow, -1, 0, 1e6), "requests -1 outside [0, 4294967295]"},
		{"requests too many", limit(algorithm.TokenBucket, algorithm.MaxRequests+1, 0, 1e6), "requests 4294967296 outside"},
		{"log too long", limit(algorithm.SlidingWindowLog, algorithm.MaxLogRequests+1, 0, 1e6), "requests 10001 outside [0, 10000] for sliding_window_log"},
		{"burst negative", limit(algorithm.TokenBucket, 1, -1, 1e6), "burst -1 outside"},
		{"burst on a window", limit(algorithm.FixedWindow, 1, 1, 1e6), "burst applies only to token_bucket, not fixed_window"},
		{"refill too slow", limit(algorithm.TokenBucket, 1, 100, 31_536_000e6), "takes 3185136000000000µs to refill"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limit.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestExpiry(t *testing.T) {
	const p = 1e6
	tests := []struct {
		name  string
		limit algorithm.Limit
		state algorithm.State
		want  int64
	}{
		{"token bucket", limit(algorithm.TokenBucket, 5, 0, p), algorithm.State{T: t0}, t0},
		{"fixed window with hits", limit(algorithm.FixedWindow, 5, 0, p), algorithm.State{T: t0, Cur: 1}, t0 + p},
		{"fixed window empty", limit(algorithm.FixedWindow, 5, 0, p), algorithm.State{T: t0}, 0},
		{"sliding counter current", limit(algorithm.SlidingWindowCounter, 5, 0, p), algorithm.State{T: t0, Cur: 1, Prev: 1}, t0 + 2*p},
		{"sliding counter previous", limit(algorithm.SlidingWindowCounter, 5, 0, p), algorithm.State{T: t0, Prev: 1}, t0 + p},
		{"sliding counter empty", limit(algorithm.SlidingWindowCounter, 5, 0, p), algorithm.State{T: t0}, 0},
		{"sliding log", limit(algorithm.SlidingWindowLog, 5, 0, p), algorithm.State{Log: []int64{t0, t0 + 7}}, t0 + 7 + p},
		{"sliding log empty", limit(algorithm.SlidingWindowLog, 5, 0, p), algorithm.State{}, 0},
	}
	for _, tt := range tests {
		if got := tt.limit.Expiry(tt.state); got != tt.want {
			t.Errorf("%s: Expiry = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func BenchmarkApply(b *testing.B) {
	for _, l := range []algorithm.Limit{
		limit(algorithm.TokenBucket, 100, 50, 1e6),
		limit(algorithm.FixedWindow, 100, 0, 1e6),
		limit(algorithm.SlidingWindowCounter, 100, 0, 1e6),
		limit(algorithm.SlidingWindowLog, 100, 0, 1e6),
	} {
		b.Run(l.Kind.String(), func(b *testing.B) {
			var s algorithm.State
			now := int64(t0)
			for b.Loop() {
				now += 7919
				if next, v := algorithm.Apply(l, s, now, 1); v.Allowed {
					s = next
				}
			}
		})
	}
}
