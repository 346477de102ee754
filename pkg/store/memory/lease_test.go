package memory_test

import (
	"context"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// TestLeaseVectors runs the lease vectors through Reserve, Return and
// Apply: the memory store must grant and give back exactly as package
// algorithm does.
func TestLeaseVectors(t *testing.T) {
	storetest.RunLeases(t, func(_ *testing.T, clock *storetest.Clock) storetest.Leaser {
		return memory.New(memory.Options{Now: clock.Now})
	})
}

func TestReserveLengthMismatch(t *testing.T) {
	s := memory.New(memory.Options{})
	err := s.Reserve(context.Background(), make([]store.LeaseRequest, 2), make([]algorithm.Lease, 1))
	if want := "memory store: 1 leases for 2 lease requests"; err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}
