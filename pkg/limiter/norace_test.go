//go:build !race

package limiter

// raceEnabled reports a build with the race detector.
const raceEnabled = false
