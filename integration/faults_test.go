package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/rls"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// faultRules puts every key of tenant t1 in one hash slot (shard_by), so
// killing the Cluster master of that slot takes all of them down at once.
// The failure-mode limits are never reached; exact is the limit checked
// for exact enforcement after recovery.
const faultRules = `domain: faults
shard_by: tenant
descriptors:
  - key: tenant
    descriptors:
      - key: mode
        value: open
        rate_limit: {unit: hour, requests_per_unit: 1000000000}
      - key: mode
        value: closed
        failure_mode: closed
        rate_limit: {unit: hour, requests_per_unit: 1000000000}
      - key: mode
        value: local
        failure_mode: local
        rate_limit: {unit: hour, requests_per_unit: 1000000000}
      - key: exact
        rate_limit: {unit: hour, requests_per_unit: 50, algorithm: fixed_window}
`

const (
	faultTenant = "t1"
	exactLimit  = 50
	// callDeadline is the deadline the load gives each call, as Envoy's
	// timeout would; generous, so a slow race-detector run does not miss it.
	callDeadline = 250 * time.Millisecond
	// storeTimeout bounds each Redis decision: well under callDeadline,
	// and long enough that a healthy Redis on a loaded machine makes it.
	storeTimeout = 100 * time.Millisecond
	// breakerOpenTime is how long the breaker stays open before it probes.
	breakerOpenTime = 300 * time.Millisecond
	// settle bounds every wait for the breaker, failover and goroutines.
	settle = 30 * time.Second
)

var faultModes = []string{"open", "closed", "local"}

func TestFaultStandaloneKilled(t *testing.T) {
	srv := redistest.StartStandalone(t)
	testFault(t, "single", []string{srv.Addr}, srv.Kill, srv.Restart)
}

func TestFaultStandaloneHung(t *testing.T) {
	srv := redistest.StartStandalone(t)
	testFault(t, "single", []string{srv.Addr}, srv.Stop, srv.Continue)
}

func TestFaultClusterFailover(t *testing.T) {
	c := redistest.StartCluster(t, redistest.WithReplicas(1))
	client := goredis.NewClient(&goredis.Options{Addr: c.Masters[0].Addr})
	defer client.Close()
	slot, err := client.ClusterKeySlot(context.Background(), "{"+faultTenant+"}").Result()
	if err != nil {
		t.Fatal(err)
	}
	victim := c.MasterOfSlot(int(slot))
	testFault(t, "cluster", c.Addrs(), victim.Kill, func() {
		// Recovery is the replica's promotion, which the cluster does by
		// itself; wait for it so the report separates it from tollgate's
		// own time to resume.
		polltest.EventuallyEvery(t, settle, pollEvery, func() bool { return c.MasterOfSlot(int(slot)) != victim }, "the replica's promotion")
	})
}

// testFault runs tollgate on Redis under steady load from the test, breaks
// Redis with fault, mends it with mend, and checks that every call was
// answered as its rule's failure mode says and in time, that the breaker
// opened and closed, that enforcement is exact again afterwards, and that
// goroutines and heap return to their baseline.
func testFault(t *testing.T, redisType string, addrs []string, fault, mend func()) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "faults.yaml"), faultRules)
	svc := startServiceIn(t, dir, func(s *app.Settings) {
		s.Store, s.Redis.Type, s.Redis.Addrs = "redis", redisType, addrs
		s.Redis.KeyPrefix = "faults"
		s.Failure.StoreTimeout, s.Failure.BreakerOpenTime = storeTimeout, breakerOpenTime
		s.Failure.LocalFallbackShare = 3
	})
	storeHealthy := func() bool { return svc.health(t, rls.StoreServiceName) == healthpb.HealthCheckResponse_SERVING }

	// Baselines, with the connections warm.
	exactCheck(t, svc, "before")
	goroutines, heap := runtime.NumGoroutine(), heapInUse()

	load := startLoad(t, svc.client, 4)
	load.waitFor(t, 100, time.Time{})

	faultAt := time.Now()
	fault()
	polltest.EventuallyEvery(t, settle, pollEvery, func() bool { return !storeHealthy() }, "the breaker to open")
	openedAfter := time.Since(faultAt)
	// Stay down for answers from the open breaker and for a failed probe,
	// which opens it again.
	load.waitFor(t, 300, time.Now())
	polltest.EventuallyEvery(t, settle, pollEvery, func() bool {
		return svc.breakerChanges(t, "open") >= 2
	}, "a failed probe to open the breaker again")
	mendAt := time.Now()
	mend()
	mended := time.Since(mendAt)
	polltest.EventuallyEvery(t, settle, pollEvery, func() bool { return storeHealthy() }, "the breaker to close")
	resumedAfter := time.Since(mendAt)
	load.waitFor(t, 100, time.Now())
	load.halt()

	exactCheck(t, svc, "after")

	outcomes := load.results()
	var during []time.Duration
	degraded := map[string]int{}
	bad := 0
	for _, o := range outcomes {
		if msg := o.problem(); msg != "" {
			if bad++; bad <= 10 {
				t.Errorf("call at +%v (mode %s): %s", o.at.Sub(faultAt).Round(time.Millisecond), o.mode, msg)
			}
		}
		if o.took > callDeadline {
			t.Errorf("call at +%v took %v, more than its deadline %v", o.at.Sub(faultAt).Round(time.Millisecond), o.took, callDeadline)
		}
		if o.degraded {
			degraded[o.mode]++
		}
		if !o.at.Before(faultAt) && o.at.Before(mendAt.Add(resumedAfter)) {
			during = append(during, o.took)
		}
	}
	if bad > 10 {
		t.Errorf("... %d bad calls in all", bad)
	}
	for _, mode := range faultModes {
		if degraded[mode] == 0 {
			t.Errorf("no degraded answer for failure mode %s during the outage", mode)
		}
	}
	slices.Sort(during)
	t.Logf("%d calls; breaker opened %v after the fault; outage p99 %v, max %v over %d calls; Redis back after %v, enforcing again %v later",
		len(outcomes), openedAfter.Round(time.Millisecond), percentile(during, 0.99), percentile(during, 1), len(during),
		mended.Round(time.Millisecond), (resumedAfter - mended).Round(time.Millisecond))

	// No pile-up: goroutines and heap return to where they were.
	polltest.EventuallyEvery(t, settle, pollEvery, func() bool {
		return runtime.NumGoroutine() <= goroutines+5
	}, "goroutines back to %d", goroutines)
	if got := heapInUse(); got > heap+32<<20 {
		t.Errorf("heap in use %d MB after the fault, %d MB before", got>>20, heap>>20)
	}
}

// breakerChanges returns how often the store's breaker has changed to the
// state named to, from tollgate_breaker_changes_total.
func (s *service) breakerChanges(t *testing.T, to string) int {
	t.Helper()
	for line := range strings.Lines(s.get(t, s.httpAddr, "/metrics")) {
		if strings.HasPrefix(line, "tollgate_breaker_changes_total{") && strings.Contains(line, `to="`+to+`"`) {
			fields := strings.Fields(line)
			n, err := strconv.Atoi(fields[len(fields)-1])
			if err != nil {
				t.Fatalf("reading %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}

// health returns the gRPC health status of service.
func (s *service) health(t *testing.T, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(s.client.Conn()).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health of %q: %v", service, err)
	}
	return r.Status
}

// exactCheck makes more calls than the exact limit on a fresh key and
// checks that exactly the limit is admitted, by Redis (no degraded answer).
func exactCheck(t *testing.T, svc *service, phase string) {
	t.Helper()
	key := fmt.Sprintf("%s-%d", phase, time.Now().UnixNano())
	admitted := 0
	for i := range exactLimit + 10 {
		resp := svc.query(t, "faults", entries("tenant", faultTenant, "exact", key))
		if isDegraded(resp) {
			t.Fatalf("%s the fault, call %d on %s was degraded", phase, i, key)
		}
		if resp.OverallCode == rlsv3.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted != exactLimit {
		t.Errorf("%s the fault: %d of %d calls admitted, want exactly %d", phase, admitted, exactLimit+10, exactLimit)
	}
}

// outcome is one call of the load.
type outcome struct {
	mode     string
	at       time.Time
	took     time.Duration
	code     rlsv3.RateLimitResponse_Code
	degraded bool
	err      error
}

// problem says what is wrong with o, or "".
func (o outcome) problem() string {
	switch {
	case o.err != nil:
		return fmt.Sprintf("error %v", o.err)
	case !o.degraded && o.code != rlsv3.RateLimitResponse_OK:
		return fmt.Sprintf("%v without a degraded store", o.code)
	case o.degraded && o.mode == "closed" && o.code != rlsv3.RateLimitResponse_OVER_LIMIT:
		return fmt.Sprintf("%v from a degraded store, want OVER_LIMIT", o.code)
	case o.degraded && o.mode != "closed" && o.code != rlsv3.RateLimitResponse_OK:
		return fmt.Sprintf("%v from a degraded store, want OK", o.code)
	}
	return ""
}

// load calls tollgate from several goroutines, each at most once per
// millisecond, cycling through the failure modes, and keeps every outcome.
type load struct {
	stop   chan struct{}
	halted sync.Once
	wg     sync.WaitGroup
	mu     sync.Mutex
	out    []outcome
}

func startLoad(t *testing.T, client *rlsclient.Client, workers int) *load {
	l := &load{stop: make(chan struct{})}
	t.Cleanup(l.halt) // when the test fails before it halts the load
	for w := range workers {
		l.wg.Go(func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for i := w; ; i++ {
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
				mode := faultModes[i%len(faultModes)]
				ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
				start := time.Now()
				resp, err := client.Query(ctx, rlsclient.Request{
					Domain:      "faults",
					Descriptors: [][]descriptor.Entry{entries("tenant", faultTenant, "mode", mode)},
				})
				o := outcome{mode: mode, at: start, took: time.Since(start), err: err}
				cancel()
				if err == nil {
					o.code, o.degraded = resp.OverallCode, isDegraded(resp)
				}
				l.mu.Lock()
				l.out = append(l.out, o)
				l.mu.Unlock()
			}
		})
	}
	return l
}

// waitFor polls until n calls have started since from.
func (l *load) waitFor(t *testing.T, n int, from time.Time) {
	t.Helper()
	polltest.EventuallyEvery(t, settle, pollEvery, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		count := 0
		for _, o := range l.out {
			if !o.at.Before(from) {
				count++
			}
		}
		return count >= n
	}, "%d calls", n)
}

// halt stops the load and waits for its goroutines; it may be called
// again.
func (l *load) halt() {
	l.halted.Do(func() { close(l.stop) })
	l.wg.Wait()
}

func (l *load) results() []outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.out)
}

func isDegraded(resp *rlsv3.RateLimitResponse) bool {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == limiter.HeaderPolicy && h.GetValue() == limiter.PolicyDegraded {
			return true
		}
	}
	return false
}

// percentile returns the q-quantile of sorted durations (q = 1: the max).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := min(int(q*float64(len(sorted))), len(sorted)-1)
	return sorted[i].Round(time.Millisecond / 10)
}

// heapInUse returns the bytes of heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func TestStartsWithoutRedis(t *testing.T) {
	for _, notServing := range []bool{false, true} {
		t.Run(fmt.Sprintf("breaker-not-serving=%v", notServing), func(t *testing.T) {
			testStartsWithoutRedis(t, notServing)
		})
	}
}

// testStartsWithoutRedis starts tollgate with its Redis down, checks the
// failure-mode answers and the health reports while the breaker is open,
// then starts Redis and checks that exact enforcement and health return.
func testStartsWithoutRedis(t *testing.T, notServing bool) {
	srv := redistest.StartStandalone(t)
	srv.Kill()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "faults.yaml"), faultRules)
	svc := startServiceIn(t, dir, func(s *app.Settings) {
		s.Store, s.Redis.Addrs, s.Failure.BreakerOpenTime = "redis", []string{srv.Addr}, breakerOpenTime
		s.Failure.BreakerNotServing, s.Failure.StoreTimeout = notServing, time.Second
	})
	for _, mode := range faultModes {
		resp := svc.query(t, "faults", entries("tenant", faultTenant, "mode", mode))
		want := rlsv3.RateLimitResponse_OK
		if mode == "closed" {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if resp.OverallCode != want || !isDegraded(resp) {
			t.Errorf("mode %s without redis: %v (degraded %v), want %v, degraded", mode, resp.OverallCode, isDegraded(resp), want)
		}
	}

	// Enough failures open the breaker, which the health reports.
	readyz := "OK, degraded: store unavailable, circuit breaker open"
	server := healthpb.HealthCheckResponse_SERVING
	if notServing {
		readyz = "not ready: store unavailable, circuit breaker open"
		server = healthpb.HealthCheckResponse_NOT_SERVING
	}
	polltest.EventuallyEvery(t, settle, pollEvery, func() bool {
		svc.query(t, "faults", entries("tenant", faultTenant, "mode", "open"))
		return strings.HasPrefix(svc.get(t, svc.httpAddr, "/readyz"), readyz)
	}, "/readyz to report the open breaker")
	if got := svc.health(t, rls.StoreServiceName); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health of %s with the breaker open: %v", rls.StoreServiceName, got)
	}
	for _, service := range []string{"", rls.ServiceName} {
		if got := svc.health(t, service); got != server {
			t.Errorf("health of %q with the breaker open: %v, want %v", service, got, server)
		}
	}

	// With no traffic at all, as when health checks took the instance out
	// of rotation, the breaker's own probes find Redis back.
	srv.Restart()
	polltest.EventuallyEvery(t, settle, pollEvery, func() bool {
		return svc.get(t, svc.httpAddr, "/readyz") == "OK\n"
	}, "/readyz to report Redis back without traffic")
	exactCheck(t, svc, "after")
	for _, service := range []string{"", rls.ServiceName, rls.StoreServiceName} {
		if got := svc.health(t, service); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q with redis: %v", service, got)
		}
	}
}
