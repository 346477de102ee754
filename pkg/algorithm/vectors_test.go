package algorithm_test

import (
	"testing"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/algorithm/algorithmtest"
)

// TestVectors runs the shared vectors through Apply alone, carrying each
// vector's state from step to step, so the algorithms are checked without
// any store. Package storetest runs the same vectors against the stores.
func TestVectors(t *testing.T) {
	for _, v := range algorithmtest.Vectors() {
		t.Run(v.Name, func(t *testing.T) {
			var s algorithm.State
			var ps algorithm.PenaltyState
			for i, step := range v.Steps {
				now := v.Start + step.At.Microseconds()
				next, got := algorithm.Apply(v.StepLimit(step), s, now, step.Cost)
				if v.Penalty != nil {
					next, ps, got = algorithm.ApplyPenalty(v.StepLimit(step), s, v.Penalty, ps, now, step.Cost)
				}
				if got != step.Want {
					t.Fatalf("step %d at %v, cost %d:\n got  %+v\n want %+v", i, step.At, step.Cost, got, step.Want)
				}
				if !got.Allowed && !step.Always && !sameState(next, s) {
					t.Fatalf("step %d at %v: a rejected hit changed the state from %+v to %+v", i, step.At, s, next)
				}
				s = next
			}
		})
	}
}
