package redis_test

import (
	"context"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

const (
	// fuzzSteps is the most steps one fuzz input takes, so that an input
	// runs in milliseconds.
	fuzzSteps = 64
	// fuzzTime is how far the clock of one fuzz input may run: 2^51 µs,
	// about 71 years, so every instant stays in the years the algorithms
	// keep exact in Lua's doubles (see algorithm.Validate).
	fuzzTime = 1 << 51
)

// FuzzParity is TestMatchesReference on fuzz input: the bytes choose the
// rules (among the fixed limits of drawParityRules, limits of any size
// algorithm.Validate admits under penalties of any size), then batches
// of hits, lease reservations and returns, and how far the clock moves
// before each, from nothing to years. A standalone server decides them on
// the store's clock, which makes an input reproducible; the reference
// must give identical verdicts and leases.
//
// Each worker of `go test -fuzz` starts its own server, and each input
// starts on an empty one (FLUSHDB) at t0. Redis still expires keys on its
// own clock: a key lives, in real time, as long as its counter has left
// on the store's clock plus the second of TTL slack the store adds on a
// client's clock, and an input runs for milliseconds, so no key vanishes
// before its counter is empty.
func FuzzParity(f *testing.F) {
	// Random bytes, 128 to 1024 of them: runs of a few steps to fuzzSteps.
	for seed := range uint64(8) {
		data := make([]byte, 128<<(seed%4))
		rng := rand.New(rand.NewPCG(seed, 7))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		f.Add(data)
	}
	d := redistest.StandaloneDeployment(f)
	client := d.Client(f)
	clock := storetest.NewClock(t0)
	s := newStore(f, redis.Options{Client: client, KeyPrefix: "f", Now: clock.Now})
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := client.FlushDB(context.Background()).Err(); err != nil {
			t.Fatalf("FLUSHDB: %v", err)
		}
		clock.Set(t0)
		src := &fuzzSource{data: data}
		left := int64(fuzzTime)
		runParity(t, s, parityRun{
			src:   src,
			rules: fuzzRules(src),
			steps: fuzzSteps,
			more:  func() bool { return len(src.data) > 0 },
			advance: func() {
				d := min(fuzzStep(src), left)
				left -= d
				clock.Advance(time.Duration(d) * time.Microsecond)
			},
		})
	})
}

// fuzzSource is a paritySource that reads its choices from fuzz input: a
// draw from [0, n) takes as many bytes as n−1 needs, big-endian, modulo n,
// so that a byte of the input changes one choice; once the input is used
// up, every draw is 0.
type fuzzSource struct {
	data []byte
}

// Int64N returns a choice in [0, n); n must be positive.
func (s *fuzzSource) Int64N(n int64) int64 {
	var v uint64
	for m := uint64(n - 1); m > 0 && len(s.data) > 0; m >>= 8 {
		v = v<<8 | uint64(s.data[0])
		s.data = s.data[1:]
	}
	return int64(v % uint64(n))
}

// IntN returns a choice in [0, n); n must be positive.
func (s *fuzzSource) IntN(n int) int { return int(s.Int64N(int64(n))) }

// fuzzRules returns the rules of a fuzz input: four, so that hits meet
// their counters again within a few steps, each one of the fixed limits
// of drawParityRules or a limit of any size, under a penalty of any size
// or none.
func fuzzRules(src paritySource) parityRules {
	fixed := fixedParityLimits()
	var rules parityRules
	for range 4 {
		var l algorithm.Limit
		if src.IntN(2) == 0 {
			l = fixed[src.IntN(len(fixed))]
		} else {
			l = fuzzLimit(src)
		}
		rules.limits = append(rules.limits, l)
		rules.penalties = append(rules.penalties, fuzzPenalty(src))
	}
	return rules
}

// fuzzLimit draws a limit that passes algorithm.Validate: every kind, and
// Requests, Burst and Period from 0 (1 for Period) to their bounds.
func fuzzLimit(src paritySource) algorithm.Limit {
	l := algorithm.Limit{Kind: algorithm.Kind(1 + src.IntN(4)), Period: 1 + scaled(src, algorithm.MaxPeriod-1)}
	if l.Kind == algorithm.SlidingWindowLog {
		l.Requests = scaled(src, algorithm.MaxLogRequests)
	} else {
		l.Requests = scaled(src, algorithm.MaxRequests)
	}
	if l.Kind == algorithm.TokenBucket {
		l.Burst = scaled(src, algorithm.MaxBurst)
		if l.Validate() != nil {
			// The bucket would take longer than MaxPeriod to refill.
			l.Burst = 0
		}
	}
	if err := l.Validate(); err != nil {
		panic(err)
	}
	return l
}

// fuzzPenalty draws a penalty that passes algorithm.Penalty.Validate, or
// none.
func fuzzPenalty(src paritySource) *algorithm.Penalty {
	if src.IntN(3) == 0 {
		return nil
	}
	p := &algorithm.Penalty{
		Tolerance:    scaled(src, 3),
		Cooldown:     1 + scaled(src, algorithm.MaxCooldown-1),
		Factor:       1 + scaled(src, algorithm.MaxFactor-1),
		ForgiveAfter: 1 + scaled(src, algorithm.MaxCooldown-1),
	}
	p.Max = p.Cooldown + scaled(src, algorithm.MaxCooldown-p.Cooldown)
	if err := p.Validate(); err != nil {
		panic(err)
	}
	return p
}

// fuzzStep draws how far the clock moves before a step, in µs: not at
// all, 1 µs, within a ms, within the small limits' periods, within ten
// seconds, or up to about two years, past the longest refill of the
// fixed limits.
func fuzzStep(src paritySource) int64 {
	switch src.IntN(6) {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return src.Int64N(1000)
	case 3:
		return src.Int64N(200_000)
	case 4:
		return src.Int64N(10_000_000)
	default:
		return scaled(src, 1<<46)
	}
}

// scaled draws from [0, most] so that each power of two is about as likely
// as the next: small values and values near most both come up.
func scaled(src paritySource, most int64) int64 {
	b := src.IntN(bits.Len64(uint64(most)) + 1)
	return src.Int64N(min(most, 1<<b-1) + 1)
}
