package integration

import (
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
)

// TestShutdownFinishesInFlightCalls stops tollgate while every call waits
// on a hung Redis: the calls in flight are answered, and Run returns
// within the grace period.
func TestShutdownFinishesInFlightCalls(t *testing.T) {
	srv := redistest.StartStandalone(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "faults.yaml"), faultRules)
	// Every call waits out the store timeout, and the breaker never opens.
	svc := startServiceIn(t, dir, func(s *app.Settings) {
		s.Store, s.Redis.Addrs = "redis", []string{srv.Addr}
		s.Failure.StoreTimeout, s.Redis.Timeout, s.Failure.BreakerFailures = 150*time.Millisecond, time.Second, 1_000_000
	})

	srv.Stop()
	defer srv.Continue()
	load := startLoad(t, svc.client, 4)
	load.waitFor(t, 8, time.Time{})
	stopAt := time.Now()
	if err := svc.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	t.Logf("Run returned %v after the stop", time.Since(stopAt).Round(time.Millisecond))
	load.halt()

	// A call that reached the server before the stop is answered. One sent
	// shortly before it may not have reached the server yet on a loaded
	// machine, and find it refusing new calls.
	inFlight := 0
	for _, o := range load.results() {
		if o.err == nil && o.at.Before(stopAt) && o.at.Add(o.took).After(stopAt) {
			inFlight++
		}
		switch {
		case o.at.After(stopAt.Add(-100 * time.Millisecond)):
			if o.err != nil && status.Code(o.err) != codes.Unavailable {
				t.Errorf("call at %v after the stop: %v, want an answer or Unavailable", o.at.Sub(stopAt), o.err)
			}
		case o.err != nil:
			t.Errorf("call started %v before the stop: %v", stopAt.Sub(o.at), o.err)
		case !o.degraded:
			t.Errorf("call started %v before the stop was not answered by its failure mode", stopAt.Sub(o.at))
		}
	}
	if inFlight == 0 {
		t.Error("no call was in flight at the stop")
	}
}
