package app_test

import (
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/polltest"
)

// TestReloadChannel checks that a receive from the App's reload channel
// reloads the rules even though their files did not change: the CLI's
// SIGHUP.
func TestReloadChannel(t *testing.T) {
	reload := make(chan struct{})
	a := apptest.Start(t, "../../config-examples", apptest.Options{Reload: reload})
	// Loaded by New, then once more as the watch starts.
	polltest.Eventually(t, 5*time.Second, func() bool { return a.Reloader().Status().Reloads == 2 },
		"the watch did not start")
	reload <- struct{}{}
	polltest.Eventually(t, 5*time.Second, func() bool { return a.Reloader().Status().Reloads == 3 },
		"the rules were not reloaded after a receive from the reload channel")
}
