//go:build race

package integration

// raceEnabled reports a build with the race detector, which slows every
// step of tollgate several times over.
const raceEnabled = true
