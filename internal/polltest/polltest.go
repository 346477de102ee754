// Package polltest waits in tests for what other goroutines or processes
// bring about, by polling with a deadline instead of sleeping.
package polltest

import (
	"testing"
	"time"
)

// Eventually polls cond every few milliseconds until it holds, and fails
// the test with the message format, args once d passes without it.
func Eventually(t testing.TB, d time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	poll := time.NewTicker(2 * time.Millisecond)
	defer poll.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			if cond() {
				return
			}
			t.Fatalf("after %v: "+format, append([]any{d}, args...)...)
		case <-poll.C:
		}
	}
}
