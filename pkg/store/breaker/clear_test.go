package breaker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/breaker"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
)

// applyOnly is a store that cannot clear.
type applyOnly struct{ store.Store }

// TestClear checks that Clear reaches the store behind the breaker, and
// that a store that cannot clear says so.
func TestClear(t *testing.T) {
	m := memory.New(memory.Options{})
	b, err := breaker.New(m, breaker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := store.Hit{Domain: "d", Entries: []store.Entry{{Key: "k", Value: "v"}}, Shard: "v",
		Limit: algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 1, Period: 3600e6}, Cost: 1}
	v := make([]algorithm.Verdict, 1)
	for i, want := range []bool{true, false} {
		if err := b.Apply(context.Background(), []store.Hit{h}, v); err != nil || v[0].Allowed != want {
			t.Fatalf("hit %d: %+v, %v; want admitted %v", i, v[0], err, want)
		}
	}
	if err := b.Clear(context.Background(), []store.Hit{h}); err != nil {
		t.Fatalf("Clear: %v", err)
	}
	if err := b.Apply(context.Background(), []store.Hit{h}, v); err != nil || !v[0].Allowed {
		t.Fatalf("after Clear: %+v, %v; want admitted", v[0], err)
	}

	b, err = breaker.New(applyOnly{m}, breaker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Clear(context.Background(), []store.Hit{h}); !errors.Is(err, store.ErrCannotClear) {
		t.Fatalf("Clear = %v, want %v", err, store.ErrCannotClear)
	}
}
