package overlimit_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/store/overlimit"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// TestForgetting checks the three ways a remembered rejection is
// forgotten before its time: Clear (this instance's reset), Forget
// (another instance's) and Drop (a changed override), for every
// algorithm. Each clears the counter in the store behind the cache first,
// as a reset elsewhere does: without the cache forgetting, the next hit
// would still be rejected from memory.
func TestForgetting(t *testing.T) {
	ways := []struct {
		name   string
		forget func(t *testing.T, s *overlimit.Store, m *memory.Store, h store.Hit)
	}{
		{"Clear", func(t *testing.T, s *overlimit.Store, _ *memory.Store, h store.Hit) {
			if err := s.Clear(context.Background(), []store.Hit{h}); err != nil {
				t.Fatalf("Clear: %v", err)
			}
		}},
		{"Forget", func(t *testing.T, s *overlimit.Store, m *memory.Store, h store.Hit) {
			clearIn(t, m, h)
			s.Forget([]store.Counter{h.Counter()})
		}},
		{"Drop", func(t *testing.T, s *overlimit.Store, m *memory.Store, h store.Hit) {
			clearIn(t, m, h)
			n := s.Drop(func(c store.Counter) bool {
				return reflect.DeepEqual(c, h.Counter())
			})
			if n != 1 {
				t.Fatalf("Drop dropped %d entries, want 1", n)
			}
		}},
	}
	for _, way := range ways {
		for _, l := range limits {
			t.Run(way.name+"/"+l.Kind.String(), func(t *testing.T) {
				clock := storetest.NewClock(start)
				m := memory.New(memory.Options{Now: clock.Now})
				s, err := overlimit.New(m, overlimit.Options{MaxBytes: 1 << 20, Now: clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				h := hit(l, "v", 1)
				for range l.Capacity() {
					decide(t, s, h, true)
				}
				decide(t, s, h, false)
				if s.Len() != 1 {
					t.Fatalf("%d entries remembered, want 1", s.Len())
				}
				clearIn(t, m, h)
				decide(t, s, h, false) // from the cache: the store would admit
				way.forget(t, s, m, h)
				if s.Len() != 0 {
					t.Fatalf("%d entries left, want 0", s.Len())
				}
				decide(t, s, h, true)
			})
		}
	}
}

// clearIn clears h's counter in m.
func clearIn(t *testing.T, m *memory.Store, h store.Hit) {
	t.Helper()
	if err := m.Clear(context.Background(), []store.Hit{h}); err != nil {
		t.Fatal(err)
	}
}

// decide applies h through s and checks whether it was admitted.
func decide(t *testing.T, s store.Store, h store.Hit, admitted bool) {
	t.Helper()
	v := make([]algorithm.Verdict, 1)
	if err := s.Apply(context.Background(), []store.Hit{h}, v); err != nil {
		t.Fatal(err)
	}
	if v[0].Allowed != admitted {
		t.Fatalf("admitted %v, want %v (%+v)", v[0].Allowed, admitted, v[0])
	}
}

// TestClearNeedsAClearer checks the error of a Clear over a store that
// cannot clear.
func TestClearNeedsAClearer(t *testing.T) {
	s, err := overlimit.New(failing{}, overlimit.Options{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Clear(context.Background(), nil); !errors.Is(err, store.ErrCannotClear) {
		t.Fatalf("Clear = %v, want %v", err, store.ErrCannotClear)
	}
}
