// Package polltest waits in tests for what other goroutines or processes
// bring about, by polling with a deadline instead of sleeping.
package polltest

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Interval is how often Eventually polls: every few milliseconds, for a
// condition that is cheap to check.
const Interval = 2 * time.Millisecond

// ErrAborted is what Poll returns when its abort channel closes first.
var ErrAborted = errors.New("polltest: aborted")

// errNotYet is the error of a condition of Eventually that does not hold.
var errNotYet = errors.New("condition not met")

// Eventually polls cond every Interval until it holds, and fails the test
// with the message format, args once d passes without it.
func Eventually(t testing.TB, d time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	EventuallyEvery(t, d, Interval, cond, format, args...)
}

// EventuallyEvery is Eventually polling every interval instead: for a
// condition that costs a call to the server under test, which polling
// every Interval would load.
func EventuallyEvery(t testing.TB, d, interval time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	err := Poll(d, interval, nil, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	if err != nil {
		t.Fatalf("after %v: "+format, append([]any{d}, args...)...)
	}
}

// Poll calls check, and again every interval, until it returns nil, and
// then returns nil. Once d passes, it calls check a last time and returns
// its error, saying how long it waited; once abort is closed (a nil abort
// never is), it returns ErrAborted. It is the form of Eventually for code
// that reports failures its own way, or from another goroutine than the
// test's: with the last error of check, which can say what it saw.
func Poll(d, interval time.Duration, abort <-chan struct{}, check func() error) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	poll := time.NewTicker(interval)
	defer poll.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-deadline.C:
			if err = check(); err == nil {
				return nil
			}
			return fmt.Errorf("gave up after %v: %w", d, err)
		case <-abort:
			return ErrAborted
		case <-poll.C:
		}
	}
}
