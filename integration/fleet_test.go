package integration

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// fleetLimit is every fleet rule's requests per hour: far more attempts
// than this are made, from three instances at once.
const fleetLimit = 200

const fleetRules = `domain: fleet
descriptors:
  - key: alg
    value: token_bucket
    rate_limit: {unit: hour, requests_per_unit: 200, algorithm: token_bucket}
  - key: alg
    value: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 200, algorithm: fixed_window}
  - key: alg
    value: sliding_window_counter
    rate_limit: {unit: hour, requests_per_unit: 200, algorithm: sliding_window_counter}
  - key: alg
    value: sliding_window_log
    rate_limit: {unit: hour, requests_per_unit: 200, algorithm: sliding_window_log}
`

func TestFleetStandalone(t *testing.T) {
	srv := redistest.StartStandalone(t)
	testFleet(t, "single", []string{srv.Addr})
}

func TestFleetCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	testFleet(t, "cluster", c.Addrs())
}

// testFleet runs three tollgate instances on one Redis deployment and
// hammers one key per algorithm through all three at once: the fleet must
// admit exactly the limit (plus what a token bucket refills meanwhile).
func testFleet(t *testing.T, redisType string, addrs []string) {
	fleet := startFleet(t, fleetRules, countIn(redisType, addrs, "fleet"))

	for _, alg := range []string{"token_bucket", "fixed_window", "sliding_window_counter", "sliding_window_log"} {
		t.Run(alg, func(t *testing.T) {
			start := time.Now()
			ok, over := hammer(t, fleet, rlsclient.Request{
				Domain:      "fleet",
				Descriptors: [][]descriptor.Entry{entries("alg", alg)},
			}, 6, 150)
			elapsed := time.Since(start)

			most := fleetLimit
			switch alg {
			case "token_bucket": // one token back every 18 s
				most += int(elapsed/(time.Hour/fleetLimit)) + 1
			case "fixed_window", "sliding_window_counter": // a window may turn during the run
				if start.Truncate(time.Hour) != time.Now().Truncate(time.Hour) {
					most *= 2
				}
			}
			t.Logf("%s: %d admitted, %d rejected in %s", alg, ok, over, elapsed.Round(time.Millisecond))
			if ok < fleetLimit || ok > most {
				t.Fatalf("the fleet admitted %d, want %d..%d", ok, fleetLimit, most)
			}
		})
	}
}

// startFleet runs three instances that serve rules from one folder, each
// with tweak.
func startFleet(t *testing.T, rules string, tweak ...func(*app.Settings)) []*service {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "fleet.yaml"), rules)
	fleet := make([]*service, 3)
	for i := range fleet {
		fleet[i] = startServiceIn(t, dir, tweak...)
	}
	return fleet
}

// hammer sends req from workers goroutines per instance, each calls times,
// and counts the answers. Any error or degraded answer fails the test.
func hammer(t *testing.T, fleet []*service, req rlsclient.Request, workers, calls int) (ok, over int) {
	t.Helper()
	var nOK, nOver atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(fleet)*workers)
	for _, svc := range fleet {
		for range workers {
			wg.Go(func() {
				for range calls {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					resp, err := svc.client.Query(ctx, req)
					cancel()
					switch {
					case err != nil:
						errs <- err
						return
					case isDegraded(resp):
						errs <- errors.New("degraded answer: the store did not decide")
						return
					case resp.OverallCode == rlsv3.RateLimitResponse_OK:
						nOK.Add(1)
					case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
						nOver.Add(1)
					default:
						errs <- fmt.Errorf("overall code %v", resp.OverallCode)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("call failed: %v", err)
	}
	return int(nOK.Load()), int(nOver.Load())
}
