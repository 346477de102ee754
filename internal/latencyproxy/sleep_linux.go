package latencyproxy

import (
	"syscall"
	"time"
)

// sleepPrecisely blocks the calling thread for d in nanosleep(2), which
// wakes within tens of microseconds of its time where a Go timer may take
// up to a millisecond (see timerSlack). The runtime runs other goroutines
// on other threads meanwhile.
func sleepPrecisely(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
		// A signal (Go's preemption among them) cut the sleep short; ts
		// holds what is left.
	}
}
