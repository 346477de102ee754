package main

import (
	"testing"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// TestSimulation runs short simulations: leases never admit past the
// limit, and with regions a millisecond apart and traffic below the limit
// they reject next to nothing and rarely call the global store.
func TestSimulation(t *testing.T) {
	for _, kind := range []algorithm.Kind{algorithm.FixedWindow, algorithm.SlidingWindowCounter, algorithm.TokenBucket} {
		for _, load := range []float64{0.8, 1.5} {
			r := simulate(config{
				limit:  algorithm.Limit{Kind: kind, Requests: 2000, Period: 1e6},
				shares: []float64{0.6, 0.3, 0.1}, load: load, delay: 1000, seconds: 6, seed: 2,
			})
			t.Logf("%v at %.1f×: %+v", kind, load, r)
			if r.overage != 0 {
				t.Errorf("%v at %.1f×: %d hits admitted past the limit", kind, load, r.overage)
			}
			if load > 1 {
				continue
			}
			if r.falseRate() > 0.001 {
				t.Errorf("%v at %.1f×: %.3f %% false rejections, want below 0.1 %%", kind, load, 100*r.falseRate())
			}
			if r.callsPerDecision() > 0.1 {
				t.Errorf("%v at %.1f×: %.3f global calls per decision", kind, load, r.callsPerDecision())
			}
		}
	}
}
