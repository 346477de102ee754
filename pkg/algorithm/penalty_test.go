package algorithm_test

import (
	"testing"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

func TestPenaltyValidate(t *testing.T) {
	ok := algorithm.Penalty{Tolerance: 3, Cooldown: 10e6, Factor: 2, Max: 900e6, ForgiveAfter: 3600e6}
	tests := []struct {
		name string
		edit func(*algorithm.Penalty)
		want string
	}{
		{"valid", func(*algorithm.Penalty) {}, ""},
		{"max equals cooldown", func(p *algorithm.Penalty) { p.Max = p.Cooldown }, ""},
		{"negative tolerance", func(p *algorithm.Penalty) { p.Tolerance = -1 }, "tolerance -1 outside [0, 1000000000]"},
		{"factor 0", func(p *algorithm.Penalty) { p.Factor = 0 }, "factor 0 outside [1, 1000]"},
		{"factor too large", func(p *algorithm.Penalty) { p.Factor = 1001 }, "factor 1001 outside [1, 1000]"},
		{"no cooldown", func(p *algorithm.Penalty) { p.Cooldown = 0 },
			"cooldown 0µs outside [1µs, 2592000000000µs]"},
		{"max below cooldown", func(p *algorithm.Penalty) { p.Max = 9e6 },
			"max 9000000µs outside [cooldown 10000000µs, 2592000000000µs]"},
		{"max too long", func(p *algorithm.Penalty) { p.Max = algorithm.MaxCooldown + 1 },
			"max 2592000000001µs outside [cooldown 10000000µs, 2592000000000µs]"},
		{"no forgiveness", func(p *algorithm.Penalty) { p.ForgiveAfter = 0 },
			"forgive_after 0µs outside [1µs, 2592000000000µs]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ok
			tt.edit(&p)
			err := p.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Fatalf("Validate() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestPenaltyCovers: a penalty applies to hits of cost 0 or more, charged
// on admission, on limits Apply can evaluate; never to refunds or
// always-charged hits, and a nil penalty to nothing.
func TestPenaltyCovers(t *testing.T) {
	p := &algorithm.Penalty{Cooldown: 1, Factor: 1, Max: 1, ForgiveAfter: 1}
	l := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 1, Period: 1e6}
	always := l
	always.Charge = algorithm.ChargeAlways
	invalid := l
	invalid.Period = 0
	tests := []struct {
		name string
		p    *algorithm.Penalty
		l    algorithm.Limit
		cost int64
		want bool
	}{
		{"hit", p, l, 1, true},
		{"check", p, l, 0, true},
		{"above capacity", p, l, 5, true},
		{"refund", p, l, -1, false},
		{"always charged", p, always, 1, false},
		{"invalid limit", p, invalid, 1, false},
		{"no penalty", nil, l, 1, false},
	}
	for _, tt := range tests {
		if got := tt.p.Covers(tt.l, tt.cost); got != tt.want {
			t.Errorf("%s: Covers = %t, want %t", tt.name, got, tt.want)
		}
	}
}
