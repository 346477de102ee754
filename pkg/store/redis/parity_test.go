package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/metrictest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// TestMatchesReference drives the Redis store and the reference, the memory
// store on a clock set to the instant Redis decided each batch at, with the
// same random batches and requires identical verdicts. Limits span every
// algorithm, limits whose products pass 2^53 (where the rounding of
// ⌈a·b/c⌉ shows), costs around the capacity, refunds, checks and soft hits,
// always-charged hits and reports far past any capacity (up to 2^62, past
// algorithm.MaxCount and algorithm.MaxDebt), penalties on two thirds of
// the limits, and batches that hit one counter several times.
//
// Against a cluster every batch has one shard, so it is one slot group
// and all-or-nothing exactly, as in the memory store; across slot groups
// the refund reports counters after the fact (see TestCrossSlotRollback).
func TestMatchesReference(t *testing.T) {
	steps := 3000
	if testing.Short() {
		steps = 500
	}
	for _, start := range []func(testing.TB) redistest.Deployment{redistest.StandaloneDeployment, redistest.ClusterDeployment} {
		d := start(t)
		t.Run(d.Name+"/client clock", func(t *testing.T) {
			clock := storetest.NewClock(t0)
			s := newStore(t, redis.Options{Client: d.Client(t), KeyPrefix: "p", Now: clock.Now})
			rng := rand.New(rand.NewPCG(1, 2))
			penalized := runParity(t, s, parityRun{
				src:      rng,
				rules:    drawParityRules(rng),
				steps:    steps,
				oneShard: d.Name == "cluster",
				advance: func() {
					clock.Advance(time.Duration(rng.ExpFloat64()*float64(20*time.Millisecond)) + time.Duration(rng.IntN(2))*time.Microsecond)
				},
			})
			requirePenalized(t, penalized, steps)
		})
		// On the server's clock, time runs for real: Redis expires keys as
		// it goes.
		t.Run(d.Name+"/server clock", func(t *testing.T) {
			s := newStore(t, redis.Options{Client: d.Client(t), KeyPrefix: "q"})
			rng := rand.New(rand.NewPCG(1, 2))
			penalized := runParity(t, s, parityRun{src: rng, rules: drawParityRules(rng), steps: steps, oneShard: d.Name == "cluster"})
			requirePenalized(t, penalized, steps)
		})
	}
}

// requirePenalized fails t when no hit of a run was blocked by a penalty.
func requirePenalized(t *testing.T, penalized, steps int) {
	t.Helper()
	if penalized == 0 {
		t.Errorf("no hit of %d steps was blocked by a penalty: the penalties went untested", steps)
	}
}

// TestMergedMatchesReference is TestMatchesReference for concurrent
// Applies: each step sends several random batches in one round trip, so
// that the batches of one slot share a script call, and the reference
// applies them one after another, in order, at the instant each was
// decided. Every batch has one shard, as on a cluster in
// TestMatchesReference.
func TestMergedMatchesReference(t *testing.T) {
	steps := 1000
	if testing.Short() {
		steps = 200
	}
	for _, start := range []func(testing.TB) redistest.Deployment{redistest.StandaloneDeployment, redistest.ClusterDeployment} {
		d := start(t)
		for _, clock := range []string{"client clock", "server clock"} {
			t.Run(d.Name+"/"+clock, func(t *testing.T) {
				opts := redis.Options{Client: d.Client(t), KeyPrefix: "m" + clock[:1]}
				c := storetest.NewClock(t0)
				if clock == "client clock" {
					opts.Now = c.Now
				}
				s := newStore(t, opts)
				ref := newReference()
				rng := rand.New(rand.NewPCG(3, 4))
				rules := drawParityRules(rng)
				for step := range steps {
					c.Advance(time.Duration(rng.ExpFloat64() * float64(20*time.Millisecond)))
					batches := make([][]store.Hit, 1+rng.IntN(8))
					got := make([][]algorithm.Verdict, len(batches))
					for b := range batches {
						shard := "s" + strconv.Itoa(rng.IntN(3))
						batches[b] = make([]store.Hit, 1+rng.IntN(4))
						for i := range batches[b] {
							batches[b][i] = parityHit(rng, rules, shard)
						}
						got[b] = make([]algorithm.Verdict, len(batches[b]))
					}
					at, errs := redis.ApplyTogether(s, context.Background(), batches, got)
					for b, hits := range batches {
						if errs[b] != nil {
							t.Fatalf("step %d, batch %d of %d: %v", step, b, len(batches), errs[b])
						}
						want := ref.apply(t, at[b], hits)
						for i := range hits {
							if got[b][i] != want[i] {
								t.Fatalf("step %d at %dµs, batch %d of %d, hit %d of %d (%s):\n got  %+v\n want %+v",
									step, at[b], b, len(batches), i, len(hits), describeHit(hits[i]), got[b][i], want[i])
							}
						}
					}
				}
			})
		}
	}
}

// TestMergedLeasesMatchReference is TestMergedMatchesReference with lease
// operations among the batches: each step sends Applies, Reserves and
// Returns in one round trip, so that those of one slot share a script
// call, and the reference applies them one after another, in order, at
// the instant each was decided. Each operation has one shard, so it is
// one slot group on a cluster. On the server's clock a lease's Until is on
// the local clock (see Reserve), so there it is compared only as at most
// the reference's.
func TestMergedLeasesMatchReference(t *testing.T) {
	steps := 1000
	if testing.Short() {
		steps = 200
	}
	for _, start := range []func(testing.TB) redistest.Deployment{redistest.StandaloneDeployment, redistest.ClusterDeployment} {
		d := start(t)
		for _, clock := range []string{"client clock", "server clock"} {
			t.Run(d.Name+"/"+clock, func(t *testing.T) {
				mp, sum := metrictest.New(t)
				opts := redis.Options{Client: d.Client(t), KeyPrefix: "ml" + clock[:1], MeterProvider: mp}
				c := storetest.NewClock(t0)
				if clock == "client clock" {
					opts.Now = c.Now
				}
				s := newStore(t, opts)
				ref := newReference()
				rng := rand.New(rand.NewPCG(5, 6))
				rules := drawParityRules(rng)
				granted := map[string][]store.LeaseReturn{} // by shard
				leases, returns, applies := 0, 0, 0
				for step := range steps {
					c.Advance(time.Duration(rng.ExpFloat64() * float64(20*time.Millisecond)))
					ops := make([]redis.Op, 1+rng.IntN(8))
					for o := range ops {
						shard := "s" + strconv.Itoa(rng.IntN(3))
						hits := make([]store.Hit, 1+rng.IntN(4))
						for i := range hits {
							hits[i] = parityHit(rng, rules, shard)
						}
						switch r := rng.IntN(4); {
						case r == 0:
							reqs := make([]store.LeaseRequest, len(hits))
							for i, h := range hits {
								reqs[i] = store.LeaseRequest{
									Counter:  h,
									Want:     rng.Int64N(max(h.Limit.Capacity(), 1)+3) - 1,
									Lifetime: time.Duration(rng.Int64N(300)) * time.Millisecond,
								}
							}
							ops[o] = redis.Op{Reserve: reqs, Leases: make([]algorithm.Lease, len(reqs))}
						case r == 1 && len(granted[shard]) > 0:
							held := granted[shard]
							n := 1 + rng.IntN(min(3, len(held)))
							rets := slices.Clone(held[len(held)-n:])
							granted[shard] = held[:len(held)-n]
							for i := range rets {
								rets[i].Unspent = rng.Int64N(rets[i].Lease.Hits+2) - rng.Int64N(2)
							}
							ops[o] = redis.Op{Return: rets}
						default:
							ops[o] = redis.Op{Hits: hits, Verdicts: make([]algorithm.Verdict, len(hits))}
						}
					}
					at, errs := redis.Together(s, context.Background(), ops)
					for o, op := range ops {
						if errs[o] != nil {
							t.Fatalf("step %d, operation %d of %d: %v", step, o, len(ops), errs[o])
						}
						switch {
						case op.Reserve != nil:
							leases++
							want := ref.reserve(t, at[o], op.Reserve)
							for i, q := range op.Reserve {
								g, w := op.Leases[i], want[i]
								if clock == "server clock" && g.Until <= w.Until {
									g.Until = w.Until
								}
								if g != w {
									t.Fatalf("step %d at %dµs, operation %d of %d, reserve %d (%s, want %d, lifetime %v):\n got  %+v\n want %+v",
										step, at[o], o, len(ops), i, describeHit(q.Counter), q.Want, q.Lifetime, op.Leases[i], w)
								}
								if g.Hits > 0 {
									shard := q.Counter.Shard
									granted[shard] = append(granted[shard], store.LeaseReturn{Counter: q.Counter, Lease: op.Leases[i]})
								}
							}
						case op.Return != nil:
							returns++
							if at[o] != 0 {
								ref.giveBack(t, at[o], op.Return)
							}
						default:
							applies++
							want := ref.apply(t, at[o], op.Hits)
							for i := range op.Hits {
								if op.Verdicts[i] != want[i] {
									t.Fatalf("step %d at %dµs, operation %d of %d, hit %d of %d (%s):\n got  %+v\n want %+v",
										step, at[o], o, len(ops), i, len(op.Hits), describeHit(op.Hits[i]), op.Verdicts[i], want[i])
								}
							}
						}
					}
				}
				if leases == 0 || returns == 0 || applies == 0 {
					t.Fatalf("%d reserves, %d returns and %d applies: each kind must be merged with the others", leases, returns, applies)
				}
				// One call per slot and step (and one more per slot where
				// the script was not loaded yet): the operations were
				// merged.
				slots := int64(1)
				if d.Name == "cluster" {
					slots = 3
				}
				if calls := sum("tollgate_redis_script_calls"); calls > slots*int64(steps+1) {
					t.Fatalf("%d script calls for %d steps of %d operations", calls, steps, leases+returns+applies)
				}
			})
		}
	}
}

// paritySource is where a differential run draws its choices: a seeded
// *rand.Rand, or fuzz input (fuzzSource).
type paritySource interface {
	IntN(n int) int
	Int64N(n int64) int64
}

// parityRules are the rules a differential run draws its hits from:
// limits[i] under penalties[i], nil for none.
type parityRules struct {
	limits    []algorithm.Limit
	penalties []*algorithm.Penalty
}

// parityRun is what runParity runs. The zero values of its optional
// fields work.
type parityRun struct {
	src   paritySource
	rules parityRules
	// steps is the most steps to take.
	steps int
	// more, when not nil, reports whether to take another step.
	more func() bool
	// oneShard gives each batch a single shard, so a cluster decides it
	// in one slot group.
	oneShard bool
	// advance, when not nil, moves the store's clock before each step;
	// nil means that the store is on the server's clock.
	advance func()
}

// runParity applies random batches to s, with random lease reservations
// and returns among them, and compares every verdict and lease with the
// reference's at the instant Redis decided. It returns how many hits a
// penalty blocked.
//
// On the server's clock a lease's Until is on the local clock (see
// Reserve), so there it is compared only as at most the reference's.
func runParity(t *testing.T, s *redis.Store, run parityRun) (penalized int) {
	ctx := context.Background()
	ref := newReference()
	rng, oneShard := run.src, run.oneShard
	var granted []store.LeaseReturn
	last := int64(0)
	for step := 0; step < run.steps && (run.more == nil || run.more()); step++ {
		if run.advance != nil {
			run.advance()
		}
		shard := ""
		if oneShard {
			shard = "s" + strconv.Itoa(rng.IntN(3))
		}
		hits := make([]store.Hit, 1+rng.IntN(4))
		for i := range hits {
			hits[i] = parityHit(rng, run.rules, shard)
		}
		var now int64
		switch op := rng.IntN(10); {
		case op < 2:
			reqs := make([]store.LeaseRequest, len(hits))
			for i, h := range hits {
				reqs[i] = store.LeaseRequest{
					Counter:  h,
					Want:     rng.Int64N(max(h.Limit.Capacity(), 1)+3) - 1,
					Lifetime: time.Duration(rng.Int64N(300)) * time.Millisecond,
				}
			}
			got := make([]algorithm.Lease, len(reqs))
			var err error
			if now, err = redis.ReserveAt(s, ctx, reqs, got); err != nil {
				t.Fatalf("step %d: Reserve: %v", step, err)
			}
			want := ref.reserve(t, now, reqs)
			for i := range reqs {
				g, w := got[i], want[i]
				if run.advance == nil && g.Until <= w.Until {
					g.Until = w.Until
				}
				if g != w {
					t.Fatalf("step %d at %dµs, reserve %d of %d (%s, want %d, lifetime %v):\n got  %+v\n want %+v",
						step, now, i, len(reqs), describeHit(hits[i]), reqs[i].Want, reqs[i].Lifetime, got[i], want[i])
				}
				if got[i].Hits > 0 {
					granted = append(granted, store.LeaseReturn{Counter: reqs[i].Counter, Lease: got[i]})
				}
			}
		case op < 4 && len(granted) > 0:
			// Return one to three leases, on a cluster all of one shard
			// (the latest lease's), so that they share one call and one
			// instant: on the server's clock each slot's call reads its
			// own TIME, while the reference gives every lease back at
			// the first call's, and a bucket's refund depends on the
			// instant (through the whole tokens it holds then).
			var rets []store.LeaseReturn
			shard := granted[len(granted)-1].Counter.Shard
			for range 1 + rng.IntN(3) {
				k := rng.IntN(len(granted))
				r := granted[k]
				if oneShard && r.Counter.Shard != shard {
					continue
				}
				r.Unspent = rng.Int64N(r.Lease.Hits+2) - rng.Int64N(2)
				rets = append(rets, r)
				granted[k] = granted[len(granted)-1]
				granted = granted[:len(granted)-1]
				if len(granted) == 0 {
					break
				}
			}
			var err error
			if now, err = redis.ReturnAt(s, ctx, rets); err != nil {
				t.Fatalf("step %d: Return: %v", step, err)
			}
			if now == 0 {
				continue // nothing was given back
			}
			ref.giveBack(t, now, rets)
		default:
			got := make([]algorithm.Verdict, len(hits))
			var err error
			if now, err = s.ApplyAt(ctx, hits, got); err != nil {
				t.Fatalf("step %d: Apply: %v", step, err)
			}
			want := ref.apply(t, now, hits)
			for i := range hits {
				if got[i] != want[i] {
					t.Fatalf("step %d at %dµs, hit %d of %d (%s):\n got  %+v\n want %+v",
						step, now, i, len(hits), describeHit(hits[i]), got[i], want[i])
				}
				if got[i].Penalized {
					penalized++
				}
			}
		}
		if now < last {
			t.Fatalf("step %d: decided at %d, before the previous step (%d)", step, now, last)
		}
		last = now
	}
	return penalized
}

// drawParityRules returns the rules to draw from: small limits that fill and
// drain during the test, and extreme ones within algorithm.Validate, two
// thirds of them under a penalty (parityPenalty).
func drawParityRules(rng paritySource) parityRules {
	ls := fixedParityLimits()
	for range 6 {
		l := algorithm.Limit{
			Kind:     algorithm.Kind(1 + rng.IntN(4)),
			Requests: rng.Int64N(10),
			Period:   1 + rng.Int64N(200_000),
		}
		if l.Kind == algorithm.TokenBucket {
			l.Burst = rng.Int64N(4)
		}
		ls = append(ls, l)
	}
	rules := parityRules{limits: ls}
	for i, l := range ls {
		if err := l.Validate(); err != nil {
			panic(err)
		}
		rules.penalties = append(rules.penalties, parityPenalty(i))
	}
	return rules
}

// fixedParityLimits returns the limits every differential run draws from.
func fixedParityLimits() []algorithm.Limit {
	return []algorithm.Limit{
		{Kind: algorithm.TokenBucket, Requests: 5, Burst: 2, Period: 100_000},
		{Kind: algorithm.TokenBucket, Requests: 3, Period: 70_001},
		{Kind: algorithm.TokenBucket, Requests: 4_000_000, Period: 1_000_000},
		{Kind: algorithm.TokenBucket, Requests: algorithm.MaxRequests, Burst: algorithm.MaxBurst, Period: 365 * 86_400_000_000},
		{Kind: algorithm.TokenBucket, Requests: 0, Burst: 3, Period: 1_000_000},
		{Kind: algorithm.FixedWindow, Requests: 4, Period: 50_000},
		{Kind: algorithm.FixedWindow, Requests: 0, Period: 50_000},
		{Kind: algorithm.SlidingWindowCounter, Requests: 6, Period: 80_000},
		{Kind: algorithm.SlidingWindowCounter, Requests: algorithm.MaxRequests, Period: 365 * 86_400_000_000},
		{Kind: algorithm.SlidingWindowLog, Requests: 5, Period: 60_000},
		{Kind: algorithm.SlidingWindowLog, Requests: 1, Period: 30_000},
	}
}

// parityHit draws a hit: one of a few descriptors per rule, so batches
// meet counters again and again.
func parityHit(rng paritySource, rules parityRules, shard string) store.Hit {
	li := rng.IntN(len(rules.limits))
	l := rules.limits[li]
	value := strconv.Itoa(li) + "." + strconv.Itoa(rng.IntN(2))
	capacity := max(l.Capacity(), 1)
	var cost int64
	switch r := rng.IntN(20); {
	case r < 2:
		cost = 0
	case r < 4:
		cost = -1 - rng.Int64N(3)
	case r < 5:
		cost = capacity + rng.Int64N(2) // about the capacity
	case r < 6 && capacity > 1<<20:
		cost = rng.Int64N(capacity) // large costs on the extreme limits
	case r < 7:
		// Reports of LLM tokens: far above most capacities, up to past
		// algorithm.MaxCount and algorithm.MaxDebt.
		cost = []int64{2_000_000, 1_000_000_000, 1 << 53, 1 << 62}[rng.IntN(4)]
	case r < 8:
		cost = -2_000_000 // a large refund
	default:
		cost = 1 + rng.Int64N(min(capacity, 3))
	}
	if shard == "" {
		shard = value
	}
	if rng.IntN(3) == 0 {
		l.Charge = algorithm.ChargeAlways
	}
	return store.Hit{
		Domain:  "parity",
		Entries: []store.Entry{{Key: "k", Value: value}, {Key: "shard", Value: shard}},
		Shard:   shard,
		Limit:   l,
		Cost:    cost,
		Soft:    rng.IntN(6) == 0,
		Penalty: rules.penalties[li],
	}
}

// parityPenalty returns the penalty of the counters of limit li: none for
// a third of the limits, and for the others cooldowns of tens of ms,
// escalating and forgiven within the hundreds of ms the test spans.
func parityPenalty(li int) *algorithm.Penalty {
	if li%3 == 2 {
		return nil
	}
	return &algorithm.Penalty{Tolerance: int64(li % 3), Cooldown: 30_000, Factor: 2, Max: 200_000, ForgiveAfter: 300_000}
}

// describeHit names a hit in a failure message.
func describeHit(h store.Hit) string {
	return fmt.Sprintf("%s %+v cost %d soft %t charge %v penalty %+v", h.Entries[0].Value, h.Limit, h.Cost, h.Soft, h.Limit.Charge, h.Penalty)
}

// reference is the memory store on a clock of its own, which apply sets
// to the instant Redis decided a batch at. Package storetest's vectors
// hold both stores to package algorithm and the batch rules; agreeing with
// the memory store on random batches carries that to what no vector
// covers.
type reference struct {
	clock *storetest.Clock
	store *memory.Store
}

func newReference() *reference {
	clock := storetest.NewClock(t0)
	return &reference{clock: clock, store: memory.New(memory.Options{Now: clock.Now})}
}

// apply decides hits at now, in µs since the epoch, and returns the
// verdicts.
func (r *reference) apply(t *testing.T, now int64, hits []store.Hit) []algorithm.Verdict {
	t.Helper()
	r.clock.Set(time.UnixMicro(now))
	verdicts := make([]algorithm.Verdict, len(hits))
	if err := r.store.Apply(context.Background(), hits, verdicts); err != nil {
		t.Fatalf("reference: Apply: %v", err)
	}
	return verdicts
}

// reserve grants leases for reqs at now, in µs since the epoch.
func (r *reference) reserve(t *testing.T, now int64, reqs []store.LeaseRequest) []algorithm.Lease {
	t.Helper()
	r.clock.Set(time.UnixMicro(now))
	leases := make([]algorithm.Lease, len(reqs))
	if err := r.store.Reserve(context.Background(), reqs, leases); err != nil {
		t.Fatalf("reference: Reserve: %v", err)
	}
	return leases
}

// giveBack returns leases at now, in µs since the epoch.
func (r *reference) giveBack(t *testing.T, now int64, returns []store.LeaseReturn) {
	t.Helper()
	r.clock.Set(time.UnixMicro(now))
	if err := r.store.Return(context.Background(), returns); err != nil {
		t.Fatalf("reference: Return: %v", err)
	}
}
