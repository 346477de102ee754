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
		return &mapStore{clock: clock, states: map[string]algorithm.State{}, penalties: map[string]algorithm.PenaltyState{}}
	})
}

// mapStore is the simplest store.Store: a map from a printed key to the
// State, with the batch rules written out plainly.
type mapStore struct {
	clock     *storetest.Clock
	states    map[string]algorithm.State
	penalties map[string]algorithm.PenaltyState // committed whatever the batch's outcome
}

func (m *mapStore) Apply(_ context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	now := algorithm.Micros(m.clock.Now())
	key := func(h store.Hit) string {
		return fmt.Sprintf("%q %q %d %d", h.Domain, h.Entries, h.Limit.Kind, h.Limit.Period)
	}
	always := func(h store.Hit) bool { return h.Limit.Charge == algorithm.ChargeAlways }
	rejected := false
	// Phase 1: the always-charged hits, in order, committed whatever happens.
	for i, h := range hits {
		if !always(h) {
			continue
		}
		next, v := algorithm.Apply(h.Limit, m.states[key(h)], now, h.Cost)
		verdicts[i] = v
		m.states[key(h)] = next
		if !v.Allowed && !h.Soft {
			rejected = true
		}
	}
	// Phase 2: the others, all or nothing.
	staged := map[string]algorithm.State{}
	state := func(key string) algorithm.State {
		if s, ok := staged[key]; ok {
			return s
		}
		return m.states[key]
	}
	for i, h := range hits {
		if always(h) {
			continue
		}
		next, v := algorithm.Apply(h.Limit, state(key(h)), now, h.Cost)
		if h.Penalty != nil {
			next, m.penalties[key(h)], v = algorithm.ApplyPenalty(h.Limit, state(key(h)), h.Penalty, m.penalties[key(h)], now, h.Cost)
		}
		verdicts[i] = v
		if v.Allowed {
			staged[key(h)] = next
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
		if verdicts[i].Allowed && !always(h) {
			_, v := algorithm.Apply(h.Limit, m.states[key(h)], now, 0)
			verdicts[i] = algorithm.Verdict{Allowed: true, Limit: v.Limit, Remaining: v.Remaining, ResetAfter: v.ResetAfter}
		}
	}
	return nil
}
