package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/breaker"
	"github.com/tollgatehq/tollgate/pkg/store/cached"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// Fault tests of leased budgets on a real Redis: an instance that dies
// holding leases, and Redis killed or hung while instances hold leases.

// faultDeadline bounds every wait of the fault tests.
const faultDeadline = 10 * time.Second

// ledger stands between a cached store and its shared store, as both its
// Inner and its Leaser, and keeps the account of what the instance holds:
// hits granted to it, less hits it gave back, less hits it admitted from
// leases (all it admitted less what its inner store admitted). Once dead,
// it makes no more calls, as a killed process would not: Reserve and Apply
// fail and Return gives nothing back.
type ledger struct {
	next shared
	// trace, if set, gets a line per event of the account (see
	// TestCachedKilledProcess), written before the event for a
	// reservation and after it otherwise, so that a reader cut off at any
	// point overestimates what the instance held.
	trace func(format string, args ...any)

	mu       sync.Mutex
	dead     bool
	calls    int   // leaser calls in flight
	pending  int64 // hits wanted by reservations in flight
	granted  int64
	returned int64
	strict   int64 // hits the inner store admitted
}

var errDead = fmt.Errorf("%w: instance killed", store.ErrUnavailable)

func (l *ledger) Apply(ctx context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	l.mu.Lock()
	dead := l.dead
	l.mu.Unlock()
	if dead {
		return errDead
	}
	err := l.next.Apply(ctx, hits, verdicts)
	if err != nil {
		return err
	}
	var n int64
	for i := range hits {
		if verdicts[i].Allowed && hits[i].Cost > 0 {
			n += hits[i].Cost
		}
	}
	l.mu.Lock()
	l.strict += n
	l.mu.Unlock()
	if l.trace != nil && n > 0 {
		l.trace("s %d", n)
	}
	return nil
}

func (l *ledger) Reserve(ctx context.Context, reqs []store.LeaseRequest, leases []algorithm.Lease) error {
	var want int64
	for i := range reqs {
		want += reqs[i].Want
	}
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return errDead
	}
	l.calls++
	l.pending += want
	l.mu.Unlock()
	if l.trace != nil {
		l.trace("r %d", want)
	}
	err := l.next.Reserve(ctx, reqs, leases)
	var granted int64
	if err == nil {
		for i := range leases {
			granted += leases[i].Hits
		}
	}
	l.mu.Lock()
	l.calls--
	l.pending -= want
	l.granted += granted
	l.mu.Unlock()
	if l.trace != nil {
		l.trace("g %d %d", want, granted)
	}
	return err
}

func (l *ledger) Return(ctx context.Context, returns []store.LeaseReturn) error {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return nil
	}
	l.calls++
	l.mu.Unlock()
	err := l.next.Return(ctx, returns)
	var returned int64
	if err == nil {
		for i := range returns {
			returned += min(returns[i].Unspent, returns[i].Lease.Hits)
		}
	}
	l.mu.Lock()
	l.calls--
	l.returned += returned
	l.mu.Unlock()
	if l.trace != nil && returned > 0 {
		l.trace("b %d", returned)
	}
	return err
}

// kill makes the ledger dead and waits until no call is in flight.
func (l *ledger) kill(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	l.dead = true
	l.mu.Unlock()
	polltest.Eventually(t, faultDeadline, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.calls == 0
	}, "the dead instance's calls to end")
}

// held returns an upper bound of the unspent hits the instance holds,
// given that it has admitted admitted hits: a reservation in flight counts
// as granted in full, and a hit being decided as unspent.
func (l *ledger) held(admitted int64) (held, strict int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.granted + l.pending - l.returned - (admitted - l.strict), l.strict
}

// settled returns the unspent hits the instance holds by the account of
// the calls that have ended, given that it has admitted admitted hits:
// hits being decided count as unspent, and hits whose return failed as
// held.
func (l *ledger) settled(admitted int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.granted - l.returned - (admitted - l.strict)
}

// faultFleet is a fleet of cached stores on one Redis, each over its own
// Redis store, breaker and ledger, driven by paced goroutines on one key.
type faultFleet struct {
	l         algorithm.Limit
	stores    []*cached.Store
	ledgers   []*ledger
	breakers  []*breaker.Store
	opened    []atomic.Bool // the breaker has been open
	closedAgn []atomic.Bool // the breaker closed after it had been open
	hit       []store.Hit

	admitted []atomic.Int64 // per instance
	failed   []atomic.Int64 // calls that failed with store.ErrUnavailable, per instance
	stopped  []atomic.Bool  // per instance: its goroutines stop

	// trace, if set, gets a line as each decision starts ("a") and one
	// as it ends ("d before after allowed").
	trace func(format string, args ...any)

	mu      sync.Mutex
	events  []fleetEvent
	longest int64
	other   []error // errors that do not wrap store.ErrUnavailable
	wg      sync.WaitGroup
}

// newFaultFleet starts instances cached stores on the Redis at addr, or
// on the Cluster whose nodes addr lists, separated by commas.
func newFaultFleet(t *testing.T, addr, prefix string, l algorithm.Limit, instances int) *faultFleet {
	f := &faultFleet{
		l:         l,
		opened:    make([]atomic.Bool, instances),
		closedAgn: make([]atomic.Bool, instances),
		admitted:  make([]atomic.Int64, instances),
		failed:    make([]atomic.Int64, instances),
		stopped:   make([]atomic.Bool, instances),
		hit:       []store.Hit{{Domain: "faults", Entries: []store.Entry{{Key: "k", Value: "v"}}, Limit: l, Cost: 1, Cached: true}},
	}
	for i := range instances {
		var c goredis.UniversalClient = goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		if addrs := strings.Split(addr, ","); len(addrs) > 1 {
			c = goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1})
		}
		t.Cleanup(func() { _ = c.Close() })
		r := newStore(t, redis.Options{Client: c, KeyPrefix: prefix})
		br, err := breaker.New(r, breaker.Options{Failures: 3, OpenFor: 200 * time.Millisecond, OnChange: func(s breaker.State) {
			switch {
			case s == breaker.Open:
				f.opened[i].Store(true)
			case s == breaker.Closed && f.opened[i].Load():
				f.closedAgn[i].Store(true)
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		lg := &ledger{next: br}
		s := cached.New(cached.Options{Inner: lg, Leaser: lg, Lifetime: fleetLifetime, Timeout: 100 * time.Millisecond})
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		f.stores, f.ledgers, f.breakers = append(f.stores, s), append(f.ledgers, lg), append(f.breakers, br)
	}
	return f
}

// drive starts perInstance goroutines per instance offering load times
// the limit in all, with Poisson arrivals, until end or until their
// instance is stopped.
func (f *faultFleet) drive(t *testing.T, load float64, perInstance int, end time.Time) {
	period := time.Duration(f.l.Period) * time.Microsecond
	routines := len(f.stores) * perInstance
	gap := time.Duration(float64(period) * float64(routines) / (load * float64(f.l.Requests)))
	for g := range routines {
		inst := g % len(f.stores)
		rng := rand.New(rand.NewPCG(uint64(g), uint64(f.l.Requests)))
		f.wg.Go(func() {
			v := make([]algorithm.Verdict, 1)
			var events []fleetEvent
			var longest int64
			next := time.Now().Add(time.Duration(rng.Int64N(int64(gap))))
			for range 100_000 {
				next = next.Add(time.Duration(rng.ExpFloat64() * float64(gap)))
				if next.After(end) || f.stopped[inst].Load() {
					break
				}
				time.Sleep(time.Until(next))
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				if f.trace != nil {
					f.trace("a")
				}
				before := algorithm.Micros(time.Now())
				err := f.stores[inst].Apply(ctx, f.hit, v)
				after := algorithm.Micros(time.Now())
				cancel()
				if f.trace != nil && err == nil {
					f.trace("d %d %d %t", before, after, v[0].Allowed)
				} else if f.trace != nil {
					f.trace("e")
				}
				if err != nil {
					if !errors.Is(err, store.ErrUnavailable) {
						f.mu.Lock()
						f.other = append(f.other, err)
						f.mu.Unlock()
					}
					f.failed[inst].Add(1)
					continue
				}
				longest = max(longest, after-before)
				if v[0].Allowed {
					f.admitted[inst].Add(1)
				}
				events = append(events, fleetEvent{key: inst, before: before, after: after, allowed: v[0].Allowed})
			}
			f.mu.Lock()
			f.events = append(f.events, events...)
			f.longest = max(f.longest, longest)
			f.mu.Unlock()
		})
	}
}

// wait waits for the goroutines and fails t on an error that does not
// wrap store.ErrUnavailable.
func (f *faultFleet) wait(t *testing.T) {
	t.Helper()
	f.wg.Wait()
	for _, err := range f.other {
		t.Errorf("Apply: %v, want an error wrapping store.ErrUnavailable", err)
	}
}

// judge checks the guarantee on the events whose call began at from or
// later (all instances on one counter), and returns the admitted hits,
// the false rejections and the capacity lost: per window, the rejections
// up to what the fleet left of the limit, in the window that contains at,
// or in every window when at is negative. (Every window loses what its
// instances hold unspent at its end; only the window of a kill loses what
// the killed instance held.)
func (f *faultFleet) judge(t *testing.T, name string, from, at int64) (admitted, falses int, lost int64) {
	t.Helper()
	var events []fleetEvent
	perWindow, rejections := map[int64]int64{}, map[int64]int64{}
	for _, e := range f.events {
		if e.before < from {
			continue
		}
		events = append(events, fleetEvent{before: e.before, after: e.after, allowed: e.allowed})
		w := e.after - e.after%f.l.Period
		if e.allowed {
			perWindow[w]++
		} else {
			rejections[w]++
		}
	}
	j := judgeCounter(t, f.l, events, f.longest)
	if j.breach != "" {
		t.Errorf("%s: %s", name, j.breach)
	}
	admitted, falses = j.admitted, j.falses
	if f.l.Kind == algorithm.FixedWindow {
		for w, n := range rejections {
			if at < 0 || w == at-at%f.l.Period {
				lost += min(n, max(0, f.l.Requests-perWindow[w]))
			}
		}
	}
	return admitted, falses, lost
}

// startOfWindowAt returns the instant offset into the next window of p µs.
func startOfWindowAt(p int64, offset time.Duration) time.Time {
	period := time.Duration(p) * time.Microsecond
	return time.Now().Truncate(period).Add(period + offset)
}

// TestCachedKilledHolder runs three cached stores on one real Redis at
// 1.5 times a fixed-window limit and kills one in the middle of a window:
// its goroutines stop, its calls stop and its leases are never given back,
// while the other two go on. The fleet never admits more than the limit
// in a window, and the capacity lost (hits rejected while the fleet had
// admitted less than the limit in their window) is at most what the dead
// instance held.
func TestCachedKilledHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("the fleet runs on real time")
	}
	srv := redistest.StartStandalone(t)
	l := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 2000, Period: 1_000_000}
	f := newFaultFleet(t, srv.Addr, "killed", l, 3)
	start := startOfWindowAt(l.Period, 0)
	time.Sleep(time.Until(start)) // not a wait for something: the run starts on a window boundary
	end := start.Add(2500 * time.Millisecond)
	f.drive(t, 1.5, 4, end)
	// Kill the third instance 1.3 s in, early in the second window, while
	// the counter still has room and leases are large.
	killAt := start.Add(1300 * time.Millisecond)
	time.Sleep(time.Until(killAt))
	victim := len(f.stores) - 1
	f.stopped[victim].Store(true)
	f.ledgers[victim].kill(t)
	held, _ := f.ledgers[victim].held(f.admitted[victim].Load())
	f.wait(t)
	if held <= 0 {
		t.Fatalf("the killed instance held %d hits", held)
	}
	admitted, falses, lost := f.judge(t, "killed holder", 0, algorithm.Micros(killAt))
	t.Logf("RESULT killed holder: held %d hits at the kill; %d admitted, %d false rejections, %d hits of capacity lost", held, admitted, falses, lost)
	if lost > held {
		t.Errorf("%d hits of capacity lost, more than the %d the killed instance held", lost, held)
	}
}

// TestCachedRedisFaults runs two cached stores on one real standalone
// Redis at 1.5 times the limit and kills or hangs Redis (SIGKILL, SIGSTOP)
// while they hold leases. While Redis is down each instance admits at most
// what it held, then its hits fail with store.ErrUnavailable, and its
// breaker opens; once Redis is back the breakers close and the fleet
// admits no more than the limit: over the whole run when Redis kept its
// data (hung), and from the restart on when it lost it (killed, no
// persistence: the counters start again empty, as they would for strict
// precision; every instance had spent its leases by then).
func TestCachedRedisFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the fleet runs on real time")
	}
	for _, tc := range []struct {
		name string
		kind algorithm.Kind
		hang bool
	}{
		{"killed/fixed_window", algorithm.FixedWindow, false},
		{"hung/fixed_window", algorithm.FixedWindow, true},
		{"killed/token_bucket", algorithm.TokenBucket, false},
		{"hung/token_bucket", algorithm.TokenBucket, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartStandalone(t)
			l := algorithm.Limit{Kind: tc.kind, Requests: 2000, Period: 1_000_000}
			f := newFaultFleet(t, srv.Addr, "faults", l, 2)
			start := startOfWindowAt(l.Period, 0)
			time.Sleep(time.Until(start)) // not a wait for something: the run starts on a window boundary
			end := start.Add(1600 * time.Millisecond)
			f.drive(t, 1.5, 2, end)
			// Fail Redis 0.2 s into the first window, while the counter
			// has room and the instances hold leases.
			time.Sleep(time.Until(start.Add(200 * time.Millisecond)))
			if tc.hang {
				srv.Stop()
			} else {
				srv.Kill()
			}
			held := make([]int64, len(f.stores))
			admitted := make([]int64, len(f.stores))
			strict := make([]int64, len(f.stores))
			for i, lg := range f.ledgers {
				admitted[i] = f.admitted[i].Load()
				held[i], strict[i] = lg.held(admitted[i])
			}
			polltest.Eventually(t, faultDeadline, func() bool {
				for i := range f.stores {
					if f.failed[i].Load() == 0 || !f.opened[i].Load() {
						return false
					}
				}
				return true
			}, "every instance to fail and its breaker to open")
			var spent, left []int64
			for i, lg := range f.ledgers {
				_, s := lg.held(0)
				n := f.admitted[i].Load() - admitted[i]
				spent = append(spent, n)
				if n > held[i]+s-strict[i] {
					t.Errorf("instance %d admitted %d hits while Redis was down, holding at most %d", i, n, held[i])
				}
				// Before its window ends, an instance that failed had
				// spent every hit it held (but those of hits still being
				// decided).
				left = append(left, lg.settled(f.admitted[i].Load()))
				if n := left[i]; tc.kind == algorithm.FixedWindow && time.Now().Before(start.Add(time.Second)) && n > 2 {
					t.Errorf("instance %d failed holding %d hits", i, n)
				}
			}
			if tc.hang {
				srv.Continue()
			} else {
				srv.Restart()
			}
			back := algorithm.Micros(time.Now())
			polltest.Eventually(t, faultDeadline, func() bool {
				for i := range f.stores {
					if !f.closedAgn[i].Load() {
						return false
					}
				}
				return true
			}, "every breaker to close")
			f.wait(t)
			var failed int64
			for i := range f.failed {
				failed += f.failed[i].Load()
			}
			from := int64(0)
			if !tc.hang {
				from = back
			}
			all, falses, lost := f.judge(t, tc.name, from, -1)
			t.Logf("RESULT %s: held at most %v at the fault, admitted %v while down, left %v when all had failed; %d calls failed; after recovery: %d admitted, %d false rejections, %d hits of capacity lost",
				tc.name, held, spent, left, failed, all, falses, lost)
		})
	}
}

// holderEnv, when set, makes TestCachedKilledProcess the holder process
// of its parent: "addr start end" (start and end in Unix ns).
const holderEnv = "TOLLGATE_TEST_LEASE_HOLDER"

// killedLimit is the limit of TestCachedKilledProcess.
var killedLimit = algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 2000, Period: 1_000_000}

// TestCachedKilledProcess is TestCachedKilledHolder with a real process,
// on a standalone Redis and on a three-master Cluster: the test binary
// runs again as a holder, a cached store on the same Redis offering a
// third of the load, tracing every lease event and decision on its stdout,
// and is killed with SIGKILL in the middle of a window. What it held is
// read from the trace, counting a reservation in flight as granted in full
// and a decision cut off as unspent, so it is never underestimated.
func TestCachedKilledProcess(t *testing.T) {
	if env := os.Getenv(holderEnv); env != "" {
		runHolder(t, env)
		return
	}
	if testing.Short() {
		t.Skip("the fleet runs on real time")
	}
	for _, deployment := range []struct {
		name  string
		start func(t *testing.T) string // the address(es) of newFaultFleet
	}{
		{"standalone", func(t *testing.T) string { return redistest.StartStandalone(t).Addr }},
		{"cluster", func(t *testing.T) string { return strings.Join(redistest.StartCluster(t).Addrs(), ",") }},
	} {
		t.Run(deployment.name, func(t *testing.T) {
			killProcess(t, deployment.start(t))
		})
	}
}

// killProcess runs TestCachedKilledProcess on the Redis at addr.
func killProcess(t *testing.T, addr string) {
	l := killedLimit
	f := newFaultFleet(t, addr, "proc", l, 2)
	start := startOfWindowAt(l.Period, 0)
	end := start.Add(2500 * time.Millisecond)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCachedKilledProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d", holderEnv, addr, start.UnixNano(), end.UnixNano()))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the holder: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var h holderTrace
	read := make(chan error, 1)
	go func() { read <- h.read(out) }()
	time.Sleep(time.Until(start)) // not a wait for something: the run starts on a window boundary
	f.drive(t, 1.0, 4, end)
	time.Sleep(time.Until(start.Add(1300 * time.Millisecond)))
	if err := cmd.Process.Signal(os.Kill); err != nil {
		t.Fatalf("killing the holder: %v", err)
	}
	killedAt := algorithm.Micros(time.Now())
	if err := <-read; err != nil {
		t.Fatalf("reading the holder's trace: %v", err)
	}
	_ = cmd.Wait()
	f.wait(t)
	held := h.held()
	if held <= 0 || h.decisions == 0 {
		t.Fatalf("the holder made %d decisions and held %d hits when killed", h.decisions, held)
	}
	if h.lastAt > killedAt {
		t.Fatalf("the holder decided at %d, after it was killed at %d", h.lastAt, killedAt)
	}
	f.events = append(f.events, h.events...)
	admitted, falses, lost := f.judge(t, "killed process", 0, killedAt)
	t.Logf("RESULT killed process: held at most %d hits at the kill (%d decisions cut off); %d admitted, %d false rejections, %d hits of capacity lost",
		held, h.cut, admitted, falses, lost)
	if lost > held {
		t.Errorf("%d hits of capacity lost, more than the %d the killed process held", lost, held)
	}
}

// holderTrace is what the parent reads of a holder's trace.
type holderTrace struct {
	events                    []fleetEvent
	decisions                 int64
	admitted, strict          int64
	wanted, answered, granted int64 // reservations: wanted in all, wanted by those answered
	returned                  int64
	started, ended            int64 // decisions
	cut                       int64
	lastAt                    int64
}

// read reads the trace until the holder's stdout closes.
func (h *holderTrace) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		n := make([]int64, len(f)-1)
		for i := range n {
			n[i], _ = strconv.ParseInt(f[i+1], 10, 64)
		}
		switch {
		case f[0] == "a" && len(f) == 1:
			h.started++
		case f[0] == "e" && len(f) == 1:
			h.ended++
		case f[0] == "d" && len(f) == 4:
			allowed := f[3] == "true"
			h.ended++
			h.decisions++
			h.lastAt = max(h.lastAt, n[1])
			h.events = append(h.events, fleetEvent{key: -1, before: n[0], after: n[1], allowed: allowed})
			if allowed {
				h.admitted++
			}
		case f[0] == "s" && len(f) == 2:
			h.strict += n[0]
		case f[0] == "r" && len(f) == 2:
			h.wanted += n[0]
		case f[0] == "g" && len(f) == 3:
			h.answered += n[0]
			h.granted += n[1]
		case f[0] == "b" && len(f) == 2:
			h.returned += n[0]
		}
	}
	h.cut = h.started - h.ended
	return sc.Err()
}

// held returns an upper bound of what the holder held: reservations not
// answered count as granted in full, and decisions cut off as unspent and
// as charged by Redis (a strict hit admitted just before the kill is
// charged, but its "s" line, written after the call, never came).
func (h *holderTrace) held() int64 {
	return h.granted + (h.wanted - h.answered) - h.returned - (h.admitted - h.strict) + h.cut
}

// runHolder is the holder process: a cached store on the Redis at the
// address env gives, offering half the limit from start to end, tracing
// on stdout until it is killed.
func runHolder(t *testing.T, env string) {
	var addr string
	var start, end int64
	if _, err := fmt.Sscan(env, &addr, &start, &end); err != nil {
		t.Fatalf("%s=%q: %v", holderEnv, env, err)
	}
	var mu sync.Mutex
	trace := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	f := newFaultFleet(t, addr, "proc", killedLimit, 1)
	f.trace, f.ledgers[0].trace = trace, trace
	time.Sleep(time.Until(time.Unix(0, start))) // not a wait for something: the run starts on a window boundary
	f.drive(t, 0.5, 4, time.Unix(0, end))
	f.wait(t)
}

// TestCachedRedisRestartWithLeasesHeld kills Redis, which keeps no data,
// while two idle cached stores hold leases, and restarts it at once: the
// counters start again empty, and the leases charged to the lost counters
// are still spent (or given back, lowering the new counter). From the
// restart on, the window admits at most the limit plus what the instances
// held at the restart; later windows at most the limit.
func TestCachedRedisRestartWithLeasesHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("the fleet runs on real time")
	}
	srv := redistest.StartStandalone(t)
	l := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 2000, Period: 1_000_000}
	f := newFaultFleet(t, srv.Addr, "restart", l, 2)
	start := startOfWindowAt(l.Period, 0)
	time.Sleep(time.Until(start)) // not a wait for something: the run starts on a window boundary
	f.drive(t, 1.5, 2, start.Add(200*time.Millisecond))
	f.wait(t)
	for _, lg := range f.ledgers {
		polltest.Eventually(t, faultDeadline, func() bool {
			lg.mu.Lock()
			defer lg.mu.Unlock()
			return lg.calls == 0
		}, "the instances' calls to end")
	}
	srv.Kill()
	srv.Restart()
	back := algorithm.Micros(time.Now())
	var held int64
	for i, lg := range f.ledgers {
		held += lg.settled(f.admitted[i].Load())
	}
	if held <= 0 {
		t.Fatalf("the instances held %d hits at the restart", held)
	}
	end := start.Add(1600 * time.Millisecond)
	f.drive(t, 1.5, 2, end)
	f.wait(t)
	perWindow := map[int64]int64{}
	for _, e := range f.events {
		if e.allowed && e.before >= back && e.before-e.before%l.Period == e.after-e.after%l.Period {
			perWindow[e.after-e.after%l.Period]++
		}
	}
	first := back - back%l.Period
	for w, n := range perWindow {
		bound := l.Requests
		if w == first {
			bound += held
		}
		if n > bound {
			t.Errorf("window at %d admitted %d hits from the restart on, want at most %d", w, n, bound)
		}
	}
	t.Logf("RESULT restart with leases held: held %d at the restart; the restart window admitted %d from the restart on (limit %d), the next %d",
		held, perWindow[first], l.Requests, perWindow[first+l.Period])
}

// announcing is a shared store that tells reserving when a Reserve
// starts.
type announcing struct {
	shared
	reserving chan struct{}
}

func (a announcing) Reserve(ctx context.Context, reqs []store.LeaseRequest, leases []algorithm.Lease) error {
	select {
	case a.reserving <- struct{}{}:
	default:
	}
	return a.shared.Reserve(ctx, reqs, leases)
}

// TestWaitersGiveUpOnAHungRedis hangs Redis while a hit reserves a lease:
// a second hit, which finds the lease empty and waits for that
// reservation, gives up with an error wrapping store.ErrUnavailable as
// soon as the reservation fails (the store gives up on the hung server
// within seconds, before the first hit's deadline) or the breaker refuses
// a call, rather than reserving again on the hung server or waiting on.
func TestWaitersGiveUpOnAHungRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis hangs for real")
	}
	for _, tc := range []struct {
		name string
		// refuse opens the breaker with strict hits meanwhile.
		refuse bool
	}{
		{"the reservation fails", false},
		{"the breaker refuses", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartStandalone(t)
			c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			br, err := breaker.New(newStore(t, redis.Options{Client: c, KeyPrefix: "wg"}), breaker.Options{Failures: 3, OpenFor: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			reserving := make(chan struct{}, 1)
			s := cached.New(cached.Options{Inner: br, Leaser: announcing{br, reserving}, Timeout: time.Hour})
			firstCtx, cancelFirst := context.WithTimeout(context.Background(), 3*faultDeadline)
			t.Cleanup(func() {
				cancelFirst()
				srv.Continue()
				_ = s.Close(context.Background())
			})
			l := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 1_000_000, Period: 3_600_000_000}
			leased := []store.Hit{{Domain: "d", Entries: []store.Entry{{Key: "k", Value: "leased"}}, Limit: l, Cost: 1, Cached: true}}
			// Two checks first, decided strictly: a counter seen once is
			// too sparse to lease, one seen twice at once is not.
			check := slices.Clone(leased)
			check[0].Cost = 0
			for range 2 {
				if err := s.Apply(context.Background(), check, make([]algorithm.Verdict, 1)); err != nil {
					t.Fatal(err)
				}
			}
			srv.Stop()
			first := make(chan error, 1)
			go func() { first <- s.Apply(firstCtx, leased, make([]algorithm.Verdict, 1)) }()
			select {
			case <-reserving:
			case <-time.After(faultDeadline):
				t.Fatal("the first hit reserved nothing")
			}
			type outcome struct {
				err      error
				deadline error // the hit's own context's, when it returned
			}
			done := make(chan outcome, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), faultDeadline)
				defer cancel()
				err := s.Apply(ctx, leased, make([]algorithm.Verdict, 1))
				done <- outcome{err: err, deadline: ctx.Err()}
			}()
			if tc.refuse {
				strict := []store.Hit{{Domain: "d", Entries: []store.Entry{{Key: "k", Value: "strict"}}, Limit: l, Cost: 1}}
				var refusal store.RetryAfterError
				for i := 0; !errors.As(err, &refusal); i++ {
					if i == 10 {
						t.Fatalf("the breaker refused no strict hit: %v", err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
					err = s.Apply(ctx, strict, make([]algorithm.Verdict, 1))
					cancel()
				}
			}
			select {
			case o := <-done:
				var refusal store.RetryAfterError
				switch {
				case !errors.Is(o.err, store.ErrUnavailable):
					t.Fatalf("the waiting hit failed with %v, want an error wrapping store.ErrUnavailable", o.err)
				case o.deadline != nil:
					t.Fatalf("the waiting hit failed at its own deadline (%v): %v", o.deadline, o.err)
				case !strings.HasPrefix(o.err.Error(), "cached store: waiting for a lease: "):
					t.Fatalf("the waiting hit failed with %v, want the failure of what it waited for", o.err)
				case tc.refuse && !errors.As(o.err, &refusal):
					t.Fatalf("the waiting hit failed with %v, want the breaker's refusal", o.err)
				case tc.refuse && len(first) > 0:
					t.Fatalf("the waiting hit gave up only once the reservation it waited for had failed (%v)", <-first)
				}
				t.Logf("the waiting hit failed with: %v", o.err)
			case <-time.After(2 * faultDeadline):
				t.Fatal("the waiting hit never returned")
			}
		})
	}
}
