package main

import (
	"math"
	"testing"
)

func TestLocalCeiling(t *testing.T) {
	tests := []struct {
		name string
		rps  float64
		args []string
		want float64
	}{
		// Each key at 2000/s: half its hits are admissions of an
		// empty bucket.
		{"saturated", 4000, []string{"--keys", "2"}, 0.5},
		// Hits 1/9 s apart on two keys: a key's next hit comes k/9 s
		// later with probability 2^-k, after its 500 ms lease from k = 5.
		{"cold", 9, []string{"--keys", "2"}, 1 - 1.0/16},
		{"no keys", 10, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := localCeiling(tt.rps, tt.args); math.Abs(got-tt.want) > 0.02 {
				t.Errorf("localCeiling = %.3f, want %.3f", got, tt.want)
			}
		})
	}
}
