//go:build !unix

package loadgen

import "time"

// processCPU returns 0: the process CPU time is not measured here.
func processCPU() time.Duration { return 0 }
