//go:build race

package limiter

// raceEnabled reports a build with the race detector, whose sync.Pool
// drops what it is given at random, so allocations cannot be counted.
const raceEnabled = true
