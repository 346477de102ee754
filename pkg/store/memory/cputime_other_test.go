//go:build !unix

package memory_test

import "time"

// cpuTime reports 0 where the process's CPU time is not available.
func cpuTime() time.Duration { return 0 }
