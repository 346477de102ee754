package polltest_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgatehq/tollgate/internal/polltest"
)

func TestPoll(t *testing.T) {
	errNo := errors.New("not yet")
	closed := make(chan struct{})
	close(closed)
	for _, tc := range []struct {
		name string
		// okFrom is the call of check from which on it returns nil; 0
		// means never.
		okFrom int
		abort  chan struct{}
		want   string // Poll's error, "" for nil
		calls  int
		took   time.Duration
	}{
		{name: "at once", okFrom: 1, calls: 1},
		{name: "on the third call", okFrom: 3, calls: 3, took: 60 * time.Millisecond},
		// At 0, at every tick up to 990 ms, and at the deadline.
		{name: "never: the last error", want: "gave up after 1s: not yet", calls: 35, took: time.Second},
		{name: "on the last call, at the deadline", okFrom: 35, calls: 35, took: time.Second},
		{name: "aborted", abort: closed, want: polltest.ErrAborted.Error(), calls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				calls := 0
				err := polltest.Poll(time.Second, 30*time.Millisecond, tc.abort, func() error {
					calls++
					if tc.okFrom != 0 && calls >= tc.okFrom {
						return nil
					}
					return errNo
				})
				switch {
				case tc.want == "" && err != nil:
					t.Fatalf("Poll = %v, want nil", err)
				case tc.want != "" && (err == nil || err.Error() != tc.want):
					t.Fatalf("Poll = %v, want %s", err, tc.want)
				}
				if tc.want != "" && tc.abort == nil && !errors.Is(err, errNo) {
					t.Errorf("Poll = %v, which does not wrap check's error", err)
				}
				if calls != tc.calls {
					t.Errorf("check called %d times, want %d", calls, tc.calls)
				}
				if took := time.Since(start); took != tc.took {
					t.Errorf("Poll returned after %v, want %v", took, tc.took)
				}
			})
		})
	}
}
