package integration

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgatehq/tollgate/integration/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// TestShutdownFinishesInFlightCalls stops tollgate while every call waits
// on a hung Redis: the calls in flight are answered, and Run returns
// within the grace period.
func TestShutdownFinishesInFlightCalls(t *testing.T) {
	srv := redistest.StartStandalone(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "faults.yaml"), faultRules)
	s := app.DefaultSettings()
	s.ConfigDir, s.GRPCAddr, s.HTTPAddr, s.DebugAddr = dir, "127.0.0.1:0", "127.0.0.1:0", ""
	s.Store, s.RedisAddrs = "redis", []string{srv.Addr}
	// Every call waits out the store timeout, and the breaker never opens.
	const storeTimeout = 150 * time.Millisecond
	s.StoreTimeout, s.RedisTimeout, s.BreakerFailures = storeTimeout, time.Second, 1_000_000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := app.New(ctx, s, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	grpcAddr, _, _ := a.Addrs()
	client, err := rlsclient.Dial(grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	srv.Stop()
	defer srv.Continue()
	load := startLoad(client, 4)
	load.waitFor(t, 8, time.Time{})
	stopAt := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of the stop")
	}
	t.Logf("Run returned %v after the stop", time.Since(stopAt).Round(time.Millisecond))
	load.halt()

	// A call that reached the server before the stop is answered; one sent
	// just before it may find the server already refusing new calls.
	inFlight := 0
	for _, o := range load.results() {
		if o.err == nil && o.at.Before(stopAt) && o.at.Add(o.took).After(stopAt) {
			inFlight++
		}
		switch {
		case o.at.After(stopAt.Add(-20 * time.Millisecond)):
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
