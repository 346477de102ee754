package storetest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// TestVectors runs the vectors through mapStore, so the batch vectors are
// checked against the batch rules without any real store.
func TestVectors(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) store.Store {
		return &mapStore{clock: clock, states: map[string]algorithm.State{}}
	})
}

// mapStore is the simplest store.Store: a map from a printed key to the
// State, with the batch rules written out plainly.
type mapStore struct {
	clock  *storetest.Clock
	states map[string]algorithm.State
}

func (m *mapStore) Apply(_ context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	now := algorithm.Micros(m.clock.Now())
	staged := map[string]algorithm.State{}
	state := func(key string) algorithm.State {
		if s, ok := staged[key]; ok {
			return s
		}
		return m.states[key]
	}
	rejected := false
	for i, h := range hits {
		key := fmt.Sprintf("%q %q %d %d", h.Domain, h.Entries, h.Limit.Kind, h.Limit.Period)
		next, v := algorithm.Apply(h.Limit, state(key), now, h.Cost)
		verdicts[i] = v
		if v.Allowed {
			staged[key] = next
		} else if !h.Soft {
			rejected = true
		}
	}
	if !rejected {
		for key, s := range staged {
			m.states[key] = s
		}
		return nil
	}
	for i, h := range hits {
		if verdicts[i].Allowed {
			key := fmt.Sprintf("%q %q %d %d", h.Domain, h.Entries, h.Limit.Kind, h.Limit.Period)
			_, v := algorithm.Apply(h.Limit, m.states[key], now, 0)
			verdicts[i] = algorithm.Verdict{Allowed: true, Limit: v.Limit, Remaining: v.Remaining, ResetAfter: v.ResetAfter}
		}
	}
	return nil
}
