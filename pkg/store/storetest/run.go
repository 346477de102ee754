// Package storetest holds what the tests of stores and of their callers
// share: the vectors every tollgate store must reproduce exactly, a
// harness that runs them against any store.Store, a settable Clock, and
// Failing, a store that is down.
//
// The vectors are package algorithmtest's, each a run of single-hit
// batches on one counter, and vectors of storetest's own for what only a
// store has: batches, soft hits and the identity of counters. Together
// they pin down the algorithms of package algorithm (every Verdict field,
// to the µs) and the batch rules of store.Store: a batch is decided hit by
// hit, each hit seeing the counter as the earlier hits of the batch left
// it; when a hit that is not Soft is rejected nothing in the batch is
// charged, and each admitted hit of that batch reports Allowed with the
// Remaining and ResetAfter of its unchanged counter (what a check, cost 0,
// would report) while rejected hits keep their own verdicts. A hit on a
// limit that Apply cannot evaluate is rejected like any other, so it
// blocks its batch unless it is Soft.
//
// The memory store runs them in its tests, the Redis store runs them
// against a real redis-server with the Clock's time handed to its Lua
// script, and this package's own test runs them through a trivial
// map-backed store that writes the batch rules out plainly.
package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/algorithm/algorithmtest"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// Vector is one scenario: steps applied in order to a store, each at an
// exact instant, with the verdicts expected.
type Vector struct {
	// Name is unique and becomes the subtest name and the Domain of every
	// hit, so one store can serve all vectors.
	Name string
	// Limit applies to every hit whose own Limit has no Kind.
	Limit algorithm.Limit
	// Start is the µs timestamp that step offsets count from.
	Start int64
	Steps []Step
}

// Step is one batch, handed to Store.Apply at Start+At. Want holds one
// verdict per hit.
type Step struct {
	At   time.Duration
	Hits []Hit
	Want []algorithm.Verdict
}

// Hit is one hit of a step.
type Hit struct {
	// Key is the descriptor value, "k" when empty: the hit counts against
	// the descriptor [{"key", Key}]. Hits with the same descriptor share a counter when
	// their limits have the same Kind and Period.
	Key string
	// Entries, when set, replaces the descriptor built from Key.
	Entries []store.Entry
	// Shard is passed as store.Hit.Shard; empty means Key. It never affects
	// which counter a hit uses.
	Shard string
	// Limit, when its Kind is set, replaces the vector's Limit.
	Limit algorithm.Limit
	Cost  int64
	Soft  bool
	// Always sets the Limit's Charge to algorithm.ChargeAlways.
	Always bool
	// Penalty is passed as store.Hit.Penalty.
	Penalty *algorithm.Penalty
}

// Run runs every vector of Vectors against one store built by newStore. The
// store must take its time from clock; Run sets the clock before each step,
// sometimes backwards between vectors (each vector has its own Domain and
// timeline). Every Verdict field is compared exactly.
func Run(t *testing.T, newStore func(t *testing.T, clock *Clock) store.Store) {
	t.Helper()
	clock := NewClock(time.UnixMicro(algorithmtest.Start))
	s := newStore(t, clock)
	for _, v := range Vectors() {
		t.Run(v.Name, func(t *testing.T) { RunVector(t, s, clock, v) })
	}
}

// RunVector runs one vector against s, setting clock before each step. It
// stops at the first step whose verdicts differ, reporting all of them.
func RunVector(t *testing.T, s store.Store, clock *Clock, v Vector) {
	t.Helper()
	for i, step := range v.Steps {
		if len(step.Want) != len(step.Hits) {
			t.Fatalf("step %d: %d verdicts for %d hits in the vector", i, len(step.Want), len(step.Hits))
		}
		clock.Set(time.UnixMicro(v.Start).Add(step.At))
		hits := make([]store.Hit, len(step.Hits))
		for j, h := range step.Hits {
			hits[j] = v.storeHit(h)
		}
		got := make([]algorithm.Verdict, len(hits))
		if err := s.Apply(t.Context(), hits, got); err != nil {
			t.Fatalf("step %d at %v: Apply: %v", i, step.At, err)
		}
		failed := false
		for j := range hits {
			if got[j] != step.Want[j] {
				failed = true
				t.Errorf("step %d at %v, hit %d (%s, cost %d):\n got  %s\n want %s",
					i, step.At, j, describe(hits[j]), hits[j].Cost, format(got[j]), format(step.Want[j]))
			}
		}
		if failed {
			t.FailNow()
		}
	}
}

func (v Vector) storeHit(h Hit) store.Hit {
	key := h.Key
	if key == "" {
		key = "k"
	}
	entries := h.Entries
	if entries == nil {
		entries = []store.Entry{{Key: "key", Value: key}}
	}
	shard := h.Shard
	if shard == "" {
		shard = key
	}
	limit := h.Limit
	if limit.Kind == 0 {
		limit = v.Limit
	}
	if h.Always {
		limit.Charge = algorithm.ChargeAlways
	}
	return store.Hit{
		Domain:  "storetest/" + v.Name,
		Entries: entries,
		Shard:   shard,
		Limit:   limit,
		Cost:    h.Cost,
		Soft:    h.Soft,
		Penalty: h.Penalty,
	}
}

func describe(h store.Hit) string {
	var b strings.Builder
	for i, e := range h.Entries {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", e.Key, e.Value)
	}
	fmt.Fprintf(&b, " %v %d+%d/%dµs", h.Limit.Kind, h.Limit.Requests, h.Limit.Burst, h.Limit.Period)
	if h.Limit.Charge == algorithm.ChargeAlways {
		b.WriteString(" always")
	}
	if h.Soft {
		b.WriteString(" soft")
	}
	if p := h.Penalty; p != nil {
		fmt.Fprintf(&b, " penalty %d/%dµs×%d≤%dµs~%dµs", p.Tolerance, p.Cooldown, p.Factor, p.Max, p.ForgiveAfter)
	}
	return b.String()
}

func format(v algorithm.Verdict) string {
	return fmt.Sprintf("{Allowed:%t Limit:%d Remaining:%d ResetAfter:%v RetryAfter:%v Penalized:%t}",
		v.Allowed, v.Limit, v.Remaining, v.ResetAfter, v.RetryAfter, v.Penalized)
}
