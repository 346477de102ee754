package xds

import (
	"math"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

func TestBackoffBounds(t *testing.T) {
	for _, tc := range []struct {
		name          string
		retry, maxRet time.Duration
	}{
		{"defaults", 0, 0},
		{"short", 10 * time.Millisecond, 100 * time.Millisecond},
		{"retry above max", time.Minute, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Options{Rules: nopRules{}, RetryInterval: tc.retry, MaxRetryInterval: tc.maxRet})
			if err != nil {
				t.Fatal(err)
			}
			base, ceil := c.opts.RetryInterval, c.opts.MaxRetryInterval
			for n := range 64 {
				want := time.Duration(math.Min(float64(base)*math.Pow(2, float64(n)), float64(ceil)))
				for range 20 {
					if d := c.backoff(n); d < want/2 || d > want {
						t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, d, want/2, want)
					}
				}
			}
		})
	}
}

type nopRules struct{}

func (nopRules) Apply(string, func() (*descriptor.Tree, error)) error { return nil }
