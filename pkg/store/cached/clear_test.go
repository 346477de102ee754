package cached_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/cached"
)

// TestClearDropsLeasesWithoutReturn checks that Clear and Forget end a
// counter's leases without giving them back: the shared counter was
// cleared, so a return would credit hits it no longer holds.
func TestClearDropsLeasesWithoutReturn(t *testing.T) {
	for _, way := range []string{"Clear", "Forget"} {
		t.Run(way, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, s := newPair(t, cached.Options{})
				for range 20 {
					apply(t, s, hitOn("a", fixed, 1))
					synctest.Wait()
				}
				if s.Held(hitOn("a", fixed, 0)) == 0 {
					t.Fatal("no lease held after 20 hits")
				}
				h := hitOn("a", fixed, 0)
				switch way {
				case "Clear":
					if err := s.Clear(context.Background(), []store.Hit{h}); err != nil {
						t.Fatalf("Clear: %v", err)
					}
				case "Forget":
					if err := m.Clear(context.Background(), []store.Hit{h}); err != nil {
						t.Fatal(err)
					}
					s.Forget([]store.Counter{h.Counter()})
				}
				if held := s.Held(h); held != 0 {
					t.Fatalf("%d hits held after %s, want 0", held, way)
				}
				synctest.Wait() // any return queued would reach the shared counter now
				if left := shared(t, m, "a", fixed); left != fixed.Capacity() {
					t.Fatalf("the shared counter has %d left, want %d: a lease was given back", left, fixed.Capacity())
				}
				apply(t, s, hitOn("a", fixed, 1))
				synctest.Wait()
				conserved(t, m, s, "a", fixed, 1)
			})
		})
	}
}

// applyOnly is a store that cannot clear.
type applyOnly struct{ store.Store }

func TestClearNeedsAClearer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _ := newPair(t, cached.Options{})
		s := cached.New(cached.Options{Inner: applyOnly{m}, Leaser: m})
		defer func() { _ = s.Close(context.Background()) }()
		if err := s.Clear(context.Background(), nil); !errors.Is(err, store.ErrCannotClear) {
			t.Fatalf("Clear = %v, want %v", err, store.ErrCannotClear)
		}
	})
}
