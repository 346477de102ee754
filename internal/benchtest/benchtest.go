// Package benchtest compares two pieces of code inside one benchmark, for
// a machine whose load varies: measured in alternating rounds within one
// loop, both see the same load, so that their ratio holds where separate
// benchmarks' timings do not.
package benchtest

import (
	"testing"
	"time"
)

// Round is how many calls of one function a round of Interleave makes.
const Round = 1000

// Interleave runs base and other in alternating rounds of Round calls
// until the benchmark's loop ends, one op being one round of each. It
// reports the ns per call of each, as "<baseName>-ns/call" and
// "<otherName>-ns/call", their ratio other over base as
// "<otherName>/<baseName>", and the allocations.
func Interleave(b *testing.B, baseName string, base func(), otherName string, other func()) {
	var spent [2]time.Duration
	b.ReportAllocs()
	for b.Loop() {
		for i, f := range [2]func(){base, other} {
			start := time.Now()
			for range Round {
				f()
			}
			spent[i] += time.Since(start)
		}
	}
	calls := float64(b.N) * Round
	b.ReportMetric(float64(spent[0].Nanoseconds())/calls, baseName+"-ns/call")
	b.ReportMetric(float64(spent[1].Nanoseconds())/calls, otherName+"-ns/call")
	b.ReportMetric(float64(spent[1])/float64(spent[0]), otherName+"/"+baseName)
}
