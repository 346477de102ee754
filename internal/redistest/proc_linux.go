package redistest

import "syscall"

// sysProcAttr kills a server when the test binary dies without its cleanups
// (a panic or a -timeout), so no redis-server outlives the test run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
