package integration

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// cachedLarge is the requests per hour of the rule whose leases the
// shutdown test returns: large enough that leases are never cut short by
// the share rule.
const cachedLarge = 100000

// cachedFleetLimit is the requests per hour of the rule the fleet hammers:
// fewer than its attempts, and more than the last 256 hits, which a
// cached counter decides strictly, so that some are leased.
const cachedFleetLimit = 1000

// cachedFleetRules has a fleet-sized rule and a large one; the strict
// probe serves the same counters (same domain, keys, algorithm and window)
// with precision strict, so that it reads the shared counters as they are.
const cachedFleetRules = `domain: cachedfleet
descriptors:
  - key: alg
    value: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: fixed_window, precision: cached}
  - key: large
    rate_limit: {unit: hour, requests_per_unit: 100000, algorithm: fixed_window, precision: cached}
`

func TestCachedFleetStandalone(t *testing.T) {
	srv := redistest.StartStandalone(t)
	testCachedFleet(t, "single", []string{srv.Addr})
}

func TestCachedFleetCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	testCachedFleet(t, "cluster", c.Addrs())
}

// testCachedFleet runs three instances with precision cached on one Redis
// deployment, hammers one key through all three, and checks that the
// fleet admits no more than the limit in the window, that decisions were
// made from leases without Redis, and that an instance that shuts down
// gives its unspent leases back.
func testCachedFleet(t *testing.T, redisType string, addrs []string) {
	useRedis := countIn(redisType, addrs, "cachedfleet")
	fleet := startFleet(t, cachedFleetRules, useRedis)
	probe := startService(t, map[string]string{"fleet.yaml": strings.ReplaceAll(cachedFleetRules, ", precision: cached", "")}, useRedis)

	t.Run("no more than the limit", func(t *testing.T) {
		start := time.Now()
		ok, over := hammer(t, fleet, rlsclient.Request{
			Domain:      "cachedfleet",
			Descriptors: [][]descriptor.Entry{entries("alg", "fixed_window")},
		}, 6, 150)
		most := cachedFleetLimit
		if start.Truncate(time.Hour) != time.Now().Truncate(time.Hour) {
			most *= 2 // the window turned during the run
		}
		t.Logf("fixed_window, precision cached: %d admitted, %d rejected in %s", ok, over, time.Since(start).Round(time.Millisecond))
		if ok > most {
			t.Fatalf("the fleet admitted %d, more than the limit %d", ok, most)
		}
		// False rejections are bounded by the leases others hold, each at
		// most 1/64 of what was left; the traffic outlasts the limit, so
		// nearly all of it is admitted.
		if least := cachedFleetLimit * 9 / 10; ok < least {
			t.Errorf("the fleet admitted %d, want at least %d of the limit %d", ok, least, cachedFleetLimit)
		}
	})

	t.Run("local decisions in /metrics", func(t *testing.T) {
		total := 0
		for i, svc := range fleet {
			n := cachedLocal(t, svc)
			t.Logf("instance %d: %d local decisions", i, n)
			total += n
		}
		if total == 0 {
			t.Error("no instance reports tollgate_cached_decisions_total{path=\"local\"} above 0")
		}
	})

	t.Run("shutdown returns leases", func(t *testing.T) {
		a := fleet[0]
		req := rlsclient.Request{Domain: "cachedfleet", Descriptors: [][]descriptor.Entry{entries("large", "k")}}
		admitted := 0
		// Decide through a until it holds unspent hits: the shared
		// counter then stands above what it admitted. Each decision
		// either spends from its lease or takes a new one, so this ends.
		unspent := 0
		for i := 0; i < 1000 && unspent == 0; i++ {
			resp := a.query(t, req.Domain, req.Descriptors...)
			if resp.GetOverallCode().String() != "OK" {
				t.Fatalf("decision %d: %v", i, resp.GetOverallCode())
			}
			admitted++
			if admitted%10 == 0 || i > 50 {
				unspent = cachedLarge - probeRemaining(t, probe) - admitted
			}
		}
		if unspent <= 0 {
			t.Fatalf("after %d hits instance 0 holds no unspent lease (shared counter %d)", admitted, cachedLarge-probeRemaining(t, probe))
		}
		if local := cachedLocal(t, a); local == 0 {
			t.Error("instance 0 decided nothing from its lease")
		}
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		if got := cachedLarge - probeRemaining(t, probe); got != admitted {
			t.Errorf("after instance 0 stopped, the shared counter holds %d hits, want the %d it admitted (%d unspent before)", got, admitted, unspent)
		}
		t.Logf("%d admitted, %d unspent returned at shutdown", admitted, unspent)
	})
}

var localDecisions = regexp.MustCompile(`(?m)^tollgate_cached_decisions_total\{path="local"\} (\d+)$`)

// cachedLocal returns the decisions svc made from leases, from its
// /metrics.
func cachedLocal(t *testing.T, svc *service) int {
	t.Helper()
	body := svc.get(t, svc.httpAddr, "/metrics")
	m := localDecisions.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics has no tollgate_cached_decisions_total{path=\"local\"}:\n%s", body)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// probeRemaining returns what the shared counter of large=k leaves, read
// by the strict probe with a check of cost 0.
func probeRemaining(t *testing.T, probe *service) int {
	t.Helper()
	body := `{"domain":"cachedfleet","descriptors":[{"entries":[{"key":"large","value":"k"}],"hits":0}]}`
	resp, err := http.Post("http://"+probe.httpAddr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Statuses []struct {
			Remaining *uint32 `json:"remaining"`
		} `json:"statuses"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || len(out.Statuses) != 1 || out.Statuses[0].Remaining == nil {
		t.Fatalf("probe: %s, %+v", resp.Status, out)
	}
	return int(*out.Statuses[0].Remaining)
}
