package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/algorithm/algorithmtest"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// Leaser is a store that leases budgets from its counters, as the memory
// and Redis stores do.
type Leaser interface {
	store.Store
	Reserve(ctx context.Context, reqs []store.LeaseRequest, leases []algorithm.Lease) error
	Return(ctx context.Context, returns []store.LeaseReturn) error
}

// RunLeases runs every vector of algorithmtest.LeaseVectors against one
// store built by newStore, through its Reserve, Return and Apply: the store
// must grant, give back and decide exactly as package algorithm does. The
// store must take its time from clock; RunLeases sets it before each step.
// Every field of a Lease and of a Verdict is compared exactly.
func RunLeases(t *testing.T, newStore func(t *testing.T, clock *Clock) Leaser) {
	t.Helper()
	clock := NewClock(time.UnixMicro(algorithmtest.Start))
	s := newStore(t, clock)
	for _, v := range algorithmtest.LeaseVectors() {
		t.Run(v.Name, func(t *testing.T) { RunLeaseVector(t, s, clock, v) })
	}
}

// RunLeaseVector runs one lease vector against s, setting clock before
// each step, and stops at the first step that differs.
func RunLeaseVector(t *testing.T, s Leaser, clock *Clock, v algorithmtest.LeaseVector) {
	t.Helper()
	ctx := t.Context()
	counter := store.Hit{Domain: "storetest/" + v.Name, Entries: []store.Entry{{Key: "key", Value: "k"}}, Shard: "k", Limit: v.Limit}
	leases := make([]algorithm.Lease, len(v.Steps))
	for i, step := range v.Steps {
		clock.Set(time.UnixMicro(v.Start).Add(step.At))
		switch step.Op {
		case algorithmtest.OpHit:
			h := counter
			h.Cost = step.Cost
			if step.Always {
				h.Limit.Charge = algorithm.ChargeAlways
			}
			got := make([]algorithm.Verdict, 1)
			if err := s.Apply(ctx, []store.Hit{h}, got); err != nil {
				t.Fatalf("step %d at %v: Apply: %v", i, step.At, err)
			}
			if got[0] != step.Hit {
				t.Fatalf("step %d at %v, hit of cost %d:\n got  %s\n want %s", i, step.At, step.Cost, format(got[0]), format(step.Hit))
			}
		case algorithmtest.OpReserve:
			got := make([]algorithm.Lease, 1)
			req := store.LeaseRequest{Counter: counter, Want: step.Want, Lifetime: step.Lifetime}
			if err := s.Reserve(ctx, []store.LeaseRequest{req}, got); err != nil {
				t.Fatalf("step %d at %v: Reserve: %v", i, step.At, err)
			}
			want := step.Lease
			if want.Hits > 0 {
				want.Window += v.Start
				want.Until += v.Start
			}
			if got[0] != want {
				t.Fatalf("step %d at %v, reserve %d:\n got  %+v\n want %+v", i, step.At, step.Want, got[0], want)
			}
			leases[i] = got[0]
		case algorithmtest.OpReturn:
			ret := store.LeaseReturn{Counter: counter, Lease: leases[step.Of], Unspent: step.Unspent}
			if err := s.Return(ctx, []store.LeaseReturn{ret}); err != nil {
				t.Fatalf("step %d at %v: Return: %v", i, step.At, err)
			}
		}
	}
}
