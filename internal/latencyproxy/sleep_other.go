//go:build !linux

package latencyproxy

import "time"

// sleepPrecisely sleeps for d; off Linux it is time.Sleep, with the
// precision of Go's timers.
func sleepPrecisely(d time.Duration) { time.Sleep(d) }
