package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/algorithm/algorithmtest"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// TestLeaseVectors runs the lease vectors through Reserve, Return and
// Apply: the memory store must grant and give back exactly as package
// algorithm does. Always-charged hits are left to the Apply vectors.
func TestLeaseVectors(t *testing.T) {
	ctx := context.Background()
	for _, v := range algorithmtest.LeaseVectors() {
		t.Run(v.Name, func(t *testing.T) {
			clock := storetest.NewClock(time.UnixMicro(v.Start))
			s := memory.New(memory.Options{Now: clock.Now})
			entries := []store.Entry{{Key: "k", Value: v.Name}}
			leases := make([]algorithm.Lease, len(v.Steps))
			for i, step := range v.Steps {
				if step.Always {
					t.Skipf("step %d is always-charged", i)
				}
				clock.Set(time.UnixMicro(v.Start + step.At.Microseconds()))
				switch step.Op {
				case algorithmtest.OpHit:
					got := make([]algorithm.Verdict, 1)
					if err := s.Apply(ctx, []store.Hit{{Domain: "d", Entries: entries, Limit: v.Limit, Cost: step.Cost}}, got); err != nil {
						t.Fatal(err)
					}
					if got[0] != step.Hit {
						t.Fatalf("step %d at %v, cost %d:\n got  %+v\n want %+v", i, step.At, step.Cost, got[0], step.Hit)
					}
				case algorithmtest.OpReserve:
					got := make([]algorithm.Lease, 1)
					req := store.LeaseRequest{Domain: "d", Entries: entries, Limit: v.Limit, Want: step.Want, Lifetime: step.Lifetime}
					if err := s.Reserve(ctx, []store.LeaseRequest{req}, got); err != nil {
						t.Fatal(err)
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
					ret := store.LeaseReturn{Domain: "d", Entries: entries, Limit: v.Limit, Lease: leases[step.Of], Unspent: step.Unspent}
					if err := s.Return(ctx, []store.LeaseReturn{ret}); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

func TestReserveLengthMismatch(t *testing.T) {
	s := memory.New(memory.Options{})
	err := s.Reserve(context.Background(), make([]store.LeaseRequest, 2), make([]algorithm.Lease, 1))
	if want := "memory store: 1 leases for 2 lease requests"; err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}
