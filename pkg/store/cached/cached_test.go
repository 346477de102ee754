package cached_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgatehq/tollgate/internal/metrictest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/cached"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
)

var (
	hour   = int64(time.Hour / time.Microsecond)
	second = int64(time.Second / time.Microsecond)
)

// hitOn is a cached hit of cost on key under l.
func hitOn(key string, l algorithm.Limit, cost int64) store.Hit {
	return store.Hit{Domain: "d", Entries: []store.Entry{{Key: "k", Value: key}}, Limit: l, Cost: cost, Cached: true}
}

// shared reads what the shared counter of key has left, without charging.
func shared(t *testing.T, m *memory.Store, key string, l algorithm.Limit) int64 {
	t.Helper()
	v := make([]algorithm.Verdict, 1)
	h := hitOn(key, l, 0)
	if err := m.Apply(context.Background(), []store.Hit{h}, v); err != nil {
		t.Fatal(err)
	}
	return v[0].Remaining
}

// apply applies one hit and returns its verdict.
func apply(t *testing.T, s store.Store, h store.Hit) algorithm.Verdict {
	t.Helper()
	v := make([]algorithm.Verdict, 1)
	if err := s.Apply(context.Background(), []store.Hit{h}, v); err != nil {
		t.Fatalf("applying %+v: %v", h, err)
	}
	return v[0]
}

// newPair returns a memory store standing for the shared counter and a
// cached store in front of it, on the bubble's clock.
func newPair(t *testing.T, opts cached.Options) (*memory.Store, *cached.Store) {
	t.Helper()
	m := memory.New(memory.Options{Now: time.Now})
	if opts.Inner == nil {
		opts.Inner = m
	}
	if opts.Leaser == nil {
		opts.Leaser = m
	}
	s := cached.New(opts)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return m, s
}

// conserved checks that the shared counter of key has charged exactly the
// hits admitted plus the hits s holds unspent.
func conserved(t *testing.T, m *memory.Store, s *cached.Store, key string, l algorithm.Limit, admitted int64) {
	t.Helper()
	synctest.Wait() // let queued returns reach the shared counter
	held := s.Held(hitOn(key, l, 0))
	if got, want := l.Capacity()-shared(t, m, key, l), admitted+held; got != want {
		t.Fatalf("shared counter charged %d, want %d admitted + %d held", got, admitted, held)
	}
}

var (
	fixed  = algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 10_000, Period: hour}
	bucket = algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 10_000, Period: 100 * hour}
)

func TestLocalDecisions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp, read := metrictest.New(t)
		m, s := newPair(t, cached.Options{MeterProvider: mp})
		for i := range 50 {
			v := apply(t, s, hitOn("a", fixed, 1))
			if !v.Allowed || v.Limit != 10_000 {
				t.Fatalf("hit %d: %+v", i, v)
			}
			synctest.Wait()
		}
		conserved(t, m, s, "a", fixed, 50)
		if local := read("tollgate_cached_decisions"); local != 50 {
			t.Fatalf("%d decisions, want 50", local)
		}
		calls := read("tollgate_cached_leaser_calls")
		if calls >= 25 {
			t.Fatalf("%d leaser calls for 50 hits: leases do not grow with demand", calls)
		}
		t.Logf("%d leaser calls for 50 hits", calls)
	})
}

func TestStatusesAreTheSharedRemainderMinusLocalSpends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, s := newPair(t, cached.Options{})
		// Two hits at one instant: the lease grows to the demand seen.
		for range 10 {
			apply(t, s, hitOn("a", fixed, 1))
		}
		synctest.Wait()
		v := apply(t, s, hitOn("a", fixed, 1))
		synctest.Wait()
		if want := 10_000 - 11; v.Remaining != int64(want) {
			t.Fatalf("remaining %d, want %d (shared %d, held %d)", v.Remaining, want, shared(t, m, "a", fixed), s.Unspent())
		}
		if v.ResetAfter <= 0 || v.ResetAfter > time.Hour {
			t.Fatalf("reset after %v", v.ResetAfter)
		}
	})
}

func TestLeaseLifecycle(t *testing.T) {
	type ending func(t *testing.T, m *memory.Store, s *cached.Store)
	for _, tc := range []struct {
		name  string
		limit algorithm.Limit
		end   ending
	}{
		{"expiry returns the unspent hits of a bucket lease", bucket, func(t *testing.T, m *memory.Store, s *cached.Store) {
			time.Sleep(31 * time.Second) // past the 30 s lifetime of a full bucket's lease
			synctest.Wait()
		}},
		{"idle counters return their lease", fixed, func(t *testing.T, m *memory.Store, s *cached.Store) {
			time.Sleep(1100 * time.Millisecond)
			synctest.Wait()
			if n := s.Len(); n != 0 {
				t.Fatalf("%d counters held after idling", n)
			}
		}},
		{"close returns every lease", fixed, func(t *testing.T, m *memory.Store, s *cached.Store) {
			if err := s.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(context.Background()); !errors.Is(err, cached.ErrClosed) {
				t.Fatalf("second close: %v, want %v", err, cached.ErrClosed)
			}
		}},
		{"a reload drops the leases of its rules", fixed, func(t *testing.T, m *memory.Store, s *cached.Store) {
			if n := s.Drop(func(c store.Counter) bool { return c.Domain == "d" }); n != 1 {
				t.Fatalf("dropped %d counters, want 1", n)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, s := newPair(t, cached.Options{})
				for range 30 {
					apply(t, s, hitOn("a", tc.limit, 1))
				}
				synctest.Wait()
				held := s.Unspent()
				if held == 0 {
					t.Fatal("no lease held")
				}
				tc.end(t, m, s)
				conserved(t, m, s, "a", tc.limit, 30)
				if n := s.Unspent(); n != 0 {
					t.Fatalf("%d hits still held", n)
				}
				t.Logf("%d hits held, then returned", held)
			})
		})
	}
}

func TestEvictionReturnsTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp, read := metrictest.New(t)
		m, s := newPair(t, cached.Options{MaxKeys: 64, MeterProvider: mp})
		const keys = 500
		for k := range keys {
			for range 3 {
				apply(t, s, hitOn(fmt.Sprint(k), fixed, 1))
			}
		}
		synctest.Wait()
		if n := s.Len(); n > 64 {
			t.Fatalf("%d counters held, cap 64", n)
		}
		if read("tollgate_cached_evictions") == 0 {
			t.Fatal("nothing evicted")
		}
		var charged int64
		for k := range keys {
			charged += 10_000 - shared(t, m, fmt.Sprint(k), fixed)
		}
		if want := 3*keys + s.Unspent(); charged != want {
			t.Fatalf("shared counters charged %d, want %d", charged, want)
		}
	})
}

func TestBatchesStayAllOrNothing(t *testing.T) {
	tight := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 2, Period: hour}
	for _, tc := range []struct {
		name   string
		second store.Hit
	}{
		{"a leased hit rejected", hitOn("b", tight, 3)},
		{"a strict hit rejected", func() store.Hit { h := hitOn("b", tight, 3); h.Cached = false; return h }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, s := newPair(t, cached.Options{})
				for range 5 {
					apply(t, s, hitOn("a", fixed, 1))
				}
				synctest.Wait()
				before := s.Held(hitOn("a", fixed, 0))
				v := make([]algorithm.Verdict, 2)
				if err := s.Apply(context.Background(), []store.Hit{hitOn("a", fixed, 1), tc.second}, v); err != nil {
					t.Fatal(err)
				}
				if !v[0].Allowed || v[1].Allowed {
					t.Fatalf("verdicts %+v", v)
				}
				if after := s.Held(hitOn("a", fixed, 0)); after != before {
					t.Fatalf("held %d after the rejected batch, %d before", after, before)
				}
				conserved(t, m, s, "a", fixed, 5)
				conserved(t, m, s, "b", tight, 0)
			})
		})
	}
}

func TestAlwaysChargedOverflowReachesTheSharedCounter(t *testing.T) {
	always := fixed
	always.Charge = algorithm.ChargeAlways
	synctest.Test(t, func(t *testing.T) {
		m, s := newPair(t, cached.Options{})
		for range 5 {
			apply(t, s, hitOn("a", fixed, 1))
		}
		synctest.Wait()
		if s.Unspent() == 0 {
			t.Fatal("no lease held")
		}
		held := s.Unspent()
		v := apply(t, s, hitOn("a", always, held+40))
		if !v.Allowed {
			t.Fatalf("verdict %+v", v)
		}
		if n := s.Unspent(); n != 0 {
			t.Fatalf("%d hits held after an always-charged hit larger than the lease", n)
		}
		conserved(t, m, s, "a", fixed, 45+held)
	})
}

func TestOverLimitAnsweredLocallyUntilRetryAfter(t *testing.T) {
	tight := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 3, Period: second}
	synctest.Test(t, func(t *testing.T) {
		// Start on a window boundary.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		mp, read := metrictest.New(t)
		_, s := newPair(t, cached.Options{MeterProvider: mp})
		for i := range 3 {
			if v := apply(t, s, hitOn("a", tight, 1)); !v.Allowed {
				t.Fatalf("hit %d rejected: %+v", i, v)
			}
		}
		synctest.Wait()
		calls := read("tollgate_cached_leaser_calls")
		time.Sleep(250 * time.Millisecond)
		v := apply(t, s, hitOn("a", tight, 1))
		if v.Allowed || v.RetryAfter <= 0 || v.RetryAfter > 750*time.Millisecond {
			t.Fatalf("verdict %+v", v)
		}
		for range 10 {
			time.Sleep(50 * time.Millisecond)
			if v := apply(t, s, hitOn("a", tight, 1)); v.Allowed {
				t.Fatalf("admitted past the limit: %+v", v)
			}
		}
		synctest.Wait()
		if got := read("tollgate_cached_leaser_calls") - calls; got > 1 {
			t.Fatalf("%d leaser calls while known over", got)
		}
		if read("tollgate_cached_decisions") == 0 {
			t.Fatal("no decisions counted")
		}
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		if v := apply(t, s, hitOn("a", tight, 1)); !v.Allowed {
			t.Fatalf("rejected in the next window: %+v", v)
		}
	})
}

// failing is a Leaser whose calls fail once down is set, as Redis does in
// an outage.
type failing struct {
	*memory.Store
	down atomic.Bool
}

var errDown = fmt.Errorf("redis down: %w", store.ErrUnavailable)

func (f *failing) Reserve(ctx context.Context, reqs []store.LeaseRequest, leases []algorithm.Lease) error {
	if f.down.Load() {
		return errDown
	}
	return f.Store.Reserve(ctx, reqs, leases)
}

func (f *failing) Return(ctx context.Context, returns []store.LeaseReturn) error {
	if f.down.Load() {
		return errDown
	}
	return f.Store.Return(ctx, returns)
}

func TestOutageSpendsWhatIsHeldThenFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := memory.New(memory.Options{Now: time.Now})
		f := &failing{Store: m}
		s := cached.New(cached.Options{Inner: m, Leaser: f})
		defer s.Close(context.Background())
		for range 20 {
			apply(t, s, hitOn("a", fixed, 1))
		}
		synctest.Wait()
		f.down.Store(true)
		held := s.Unspent()
		var admitted int64
		var err error
		for range 1000 {
			v := make([]algorithm.Verdict, 1)
			if err = s.Apply(context.Background(), []store.Hit{hitOn("a", fixed, 1)}, v); err != nil {
				break
			}
			admitted++
		}
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("error %v, want %v", err, store.ErrUnavailable)
		}
		if admitted != held {
			t.Fatalf("admitted %d during the outage, held %d", admitted, held)
		}
	})
}

// slowLeaser is a Leaser whose reservations are answered delay after the
// shared counter granted them, as a reply on the network would be.
type slowLeaser struct {
	*memory.Store
	delay time.Duration
}

func (l slowLeaser) Reserve(ctx context.Context, reqs []store.LeaseRequest, leases []algorithm.Lease) error {
	err := l.Store.Reserve(ctx, reqs, leases)
	time.Sleep(l.delay)
	return err
}

// TestNoLeaseSpentAfterItsEnd reserves a window lease just before its
// window ends and gets the answer just after: the hit that waited for it
// must not spend it (it would be admitted in the new window on a hit
// charged to the old one), but reserve again in the new window.
func TestNoLeaseSpentAfterItsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 100, Period: second}
		period := time.Duration(second) * time.Microsecond
		time.Sleep(time.Until(time.Now().Truncate(period).Add(period - time.Millisecond)))
		m := memory.New(memory.Options{Now: time.Now})
		s := cached.New(cached.Options{Inner: m, Leaser: slowLeaser{Store: m, delay: 2 * time.Millisecond}})
		defer s.Close(context.Background())
		if v := apply(t, s, hitOn("a", l, 1)); !v.Allowed {
			t.Fatalf("the hit was rejected: %+v", v)
		}
		// The hit was admitted in the new window: the counter must have
		// room for no more than the rest of the limit in it.
		admitted := 0
		for range l.Requests {
			if apply(t, m, hitOn("a", l, 1)).Allowed {
				admitted++
			}
		}
		if admitted > int(l.Requests)-1 {
			t.Fatalf("the new window admitted %d more hits after the cached one, limit %d", admitted, l.Requests)
		}
	})
}

// counting counts the calls made to the shared store, as Redis would see
// them: strict decisions, reservations and returns.
type counting struct {
	*memory.Store
	applies, reserves, returns atomic.Int64
}

func (c *counting) Apply(ctx context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	c.applies.Add(1)
	return c.Store.Apply(ctx, hits, verdicts)
}

func (c *counting) Reserve(ctx context.Context, reqs []store.LeaseRequest, leases []algorithm.Lease) error {
	c.reserves.Add(1)
	return c.Store.Reserve(ctx, reqs, leases)
}

func (c *counting) Return(ctx context.Context, returns []store.LeaseReturn) error {
	c.returns.Add(1)
	return c.Store.Return(ctx, returns)
}

func TestEmptiedBucketAnsweredLocallyUntilItsNextToken(t *testing.T) {
	slow := algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 10, Period: second}
	synctest.Test(t, func(t *testing.T) {
		m := memory.New(memory.Options{Now: time.Now})
		inner := &counting{Store: m}
		_, s := newPair(t, cached.Options{Inner: inner, Leaser: m})
		// Ten tokens: near its limit the bucket is decided strictly, and
		// the last admission leaves it without a whole token.
		for i := range 10 {
			if v := apply(t, s, hitOn("a", slow, 1)); !v.Allowed {
				t.Fatalf("hit %d rejected: %+v", i, v)
			}
		}
		time.Sleep(30 * time.Millisecond)
		calls := inner.applies.Load()
		v := apply(t, s, hitOn("a", slow, 1))
		if got := inner.applies.Load() - calls; got != 0 {
			t.Fatalf("%d calls to the inner store for a hit the empty bucket rejects", got)
		}
		want := apply(t, m, hitOn("a", slow, 0)) // the strict status
		want.Allowed = false
		if v != want {
			t.Fatalf("verdict %+v, want the strict one %+v", v, want)
		}
		time.Sleep(v.RetryAfter)
		if v := apply(t, s, hitOn("a", slow, 1)); !v.Allowed {
			t.Fatalf("rejected once a token refilled: %+v", v)
		}
	})
}

// TestPenalizedHitsAreDecidedStrictly: a cached hit under a penalty is
// never leased; it goes to the shared store, which counts its strikes.
func TestPenalizedHitsAreDecidedStrictly(t *testing.T) {
	tight := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 3, Period: second}
	penalty := &algorithm.Penalty{Cooldown: 10 * second, Factor: 2, Max: 60 * second, ForgiveAfter: 60 * second}
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		mp, read := metrictest.New(t)
		m, s := newPair(t, cached.Options{MeterProvider: mp})
		h := hitOn("a", tight, 1)
		h.Penalty = penalty
		for i := range 3 {
			if v := apply(t, s, h); !v.Allowed {
				t.Fatalf("hit %d rejected: %+v", i, v)
			}
		}
		if got := shared(t, m, "a", tight); got != 0 {
			t.Fatalf("the shared counter has %d left, want 0: hits were not decided there", got)
		}
		if v := apply(t, s, h); v.Allowed || v.Penalized {
			t.Fatalf("first rejection: %+v", v)
		}
		time.Sleep(100 * time.Millisecond)
		if v := apply(t, s, h); !v.Penalized || v.RetryAfter != 10*time.Second {
			t.Fatalf("a strike within Retry-After: %+v, want a 10 s cooldown", v)
		}
		synctest.Wait()
		if calls := read("tollgate_cached_leaser_calls"); calls != 0 {
			t.Fatalf("%d leaser calls for hits under a penalty", calls)
		}
	})
}

// wanting is a Leaser that records what each reservation asked for, and
// when.
type wanting struct {
	*memory.Store
	mu    sync.Mutex
	at    []time.Time
	wants []int64
}

func (w *wanting) Reserve(ctx context.Context, reqs []store.LeaseRequest, leases []algorithm.Lease) error {
	w.mu.Lock()
	for _, q := range reqs {
		w.at, w.wants = append(w.at, time.Now()), append(w.wants, q.Want)
	}
	w.mu.Unlock()
	return w.Store.Reserve(ctx, reqs, leases)
}

// TestWindowLeaseSizedForWhatIsLeftOfItsWindow keeps a steady demand of
// 100 hits per RenewInterval on a fixed window: a lease reserved in the
// last half interval of the window asks for no more than the demand of
// what is left of it, since what it does not spend by then is lost to the
// fleet until the window ends.
func TestWindowLeaseSizedForWhatIsLeftOfItsWindow(t *testing.T) {
	l := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 1_000_000, Period: second}
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		m := memory.New(memory.Options{Now: time.Now})
		w := &wanting{Store: m}
		_, s := newPair(t, cached.Options{Inner: m, Leaser: w})
		for range 999 {
			apply(t, s, hitOn("a", l, 1))
			time.Sleep(time.Millisecond)
		}
		synctest.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		for i, at := range w.at {
			left := time.Second - at.Sub(at.Truncate(time.Second))
			if most := int64(left/time.Millisecond) + 1; w.wants[i] > most {
				t.Errorf("a reservation %v before the window's end asked for %d hits, want at most %d", left, w.wants[i], most)
			}
		}
		// A hit a millisecond, seen from the second: the first lease
		// covers the rest of the window.
		if n := len(w.at); n == 0 || n > 3 {
			t.Fatalf("%d reservations in the window, want one to three", n)
		}
	})
}

// TestPreviousWindowWeighsOnTheNextLease fills a sliding window, so that
// at the start of the next one the previous window's weight leaves room
// for a few hits only: a lease must not take them all on the belief that
// a new window holds the whole limit, while the other instances are
// refused them.
func TestPreviousWindowWeighsOnTheNextLease(t *testing.T) {
	l := algorithm.Limit{Kind: algorithm.SlidingWindowCounter, Requests: 10_000, Period: second}
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		m := memory.New(memory.Options{Now: time.Now})
		w := &wanting{Store: m}
		_, s := newPair(t, cached.Options{Inner: m, Leaser: w})
		start := time.Now().Add(time.Second) // of the next window
		for range 100 {
			for range 100 {
				apply(t, s, hitOn("a", l, 1))
			}
			time.Sleep(10 * time.Millisecond)
		}
		synctest.Wait()
		if left := shared(t, m, "a", l); left > 64 {
			t.Fatalf("the window was left with %d hits", left)
		}
		time.Sleep(time.Until(start.Add(2 * time.Millisecond)))
		left := shared(t, m, "a", l) // what the previous window's weight leaves
		apply(t, s, hitOn("a", l, 1))
		synctest.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		for i, at := range w.at {
			if most := max(1, left/64); !at.Before(start) && w.wants[i] > most {
				t.Errorf("a reservation at %v into the window, with %d left, asked for %d hits, want at most %d", at.Sub(start), left, w.wants[i], most)
			}
		}
	})
}

// TestHitsGivenBackReachAnInstanceThatWasRefused has one instance refused
// strictly on a counter while another holds part of its limit in a lease:
// once that lease is given back, the refused instance admits again within
// a RenewInterval, not only when the window ends.
func TestHitsGivenBackReachAnInstanceThatWasRefused(t *testing.T) {
	l := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 2000, Period: hour}
	synctest.Test(t, func(t *testing.T) {
		m := memory.New(memory.Options{Now: time.Now})
		holder := cached.New(cached.Options{Inner: m, Leaser: m})
		refused := cached.New(cached.Options{Inner: m, Leaser: m})
		defer refused.Close(context.Background())
		for range 3 {
			apply(t, holder, hitOn("a", l, 1))
		}
		synctest.Wait()
		if holder.Held(hitOn("a", l, 0)) == 0 {
			t.Fatal("the holder holds no lease")
		}
		for shared(t, m, "a", l) > 0 {
			apply(t, m, hitOn("a", l, 1))
		}
		// A grant of nothing, then a strict rejection once it has passed.
		for range 2 {
			if v := apply(t, refused, hitOn("a", l, 1)); v.Allowed {
				t.Fatalf("admitted with the limit reserved: %+v", v)
			}
			time.Sleep(150 * time.Millisecond)
		}
		if err := holder.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
		if v := apply(t, refused, hitOn("a", l, 1)); !v.Allowed {
			t.Fatalf("rejected after the lease was given back: %+v", v)
		}
	})
}

// TestNearItsLimitACounterIsDecidedStrictly leaves a counter 200 hits
// short of its limit: its hits are decided by the shared counter, with no
// lease held here that the other instances would be refused.
func TestNearItsLimitACounterIsDecidedStrictly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := memory.New(memory.Options{Now: time.Now})
		w := &wanting{Store: m}
		_, s := newPair(t, cached.Options{Inner: m, Leaser: w})
		apply(t, m, hitOn("a", fixed, fixed.Requests-200))
		apply(t, s, hitOn("a", fixed, 1)) // learns what is left
		synctest.Wait()
		w.mu.Lock()
		reserved := len(w.wants)
		w.mu.Unlock()
		for i := range 50 {
			if v := apply(t, s, hitOn("a", fixed, 1)); !v.Allowed {
				t.Fatalf("hit %d rejected: %+v", i, v)
			}
			synctest.Wait()
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if n := len(w.wants) - reserved; n != 0 {
			t.Fatalf("%d reservations (asking for %v) with 200 hits left, want none", n, w.wants[reserved:])
		}
		conserved(t, m, s, "a", fixed, fixed.Requests-200+51)
	})
}

// TestEndedLeasesGivenBackWhenWorthIt checks that a lease that ends is
// given back only when its hits still count for others: a slow bucket's
// tokens are, but not the few tokens of a fast bucket far from its limit,
// which refill within an interval, nor a fixed window's hits once their
// window is over.
func TestEndedLeasesGivenBackWhenWorthIt(t *testing.T) {
	fast := algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 10_000, Period: second}
	perSecond := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 10_000, Period: second}
	for _, tc := range []struct {
		name     string
		limit    algorithm.Limit
		returned bool
	}{
		{"a slow bucket's tokens", bucket, true},
		{"a fast bucket's tokens", fast, false},
		{"a fixed window's hits after their window", perSecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mp, read := metrictest.New(t)
				_, s := newPair(t, cached.Options{MeterProvider: mp})
				for range 30 {
					apply(t, s, hitOn("a", tc.limit, 1))
				}
				synctest.Wait()
				if s.Unspent() == 0 {
					t.Fatal("no lease held")
				}
				time.Sleep(1100 * time.Millisecond) // past a bucket lease's 500 ms and the window
				synctest.Wait()
				if returned := read("tollgate_cached_returned_hits"); (returned > 0) != tc.returned {
					t.Fatalf("%d hits given back, want some: %v", returned, tc.returned)
				}
			})
		})
	}
}

// TestNeverCostlierThanStrict sends sparse traffic, which a strict rule
// decides with one call per hit: leases must not cost more. A counter too
// sparse to spend a lease is decided by one strict call, with no
// reservation ahead and nothing to give back; a window's counter seen a
// few times a window reserves once a window and spends locally, and a
// bucket far from empty lends for seconds.
func TestNeverCostlierThanStrict(t *testing.T) {
	bucket := algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 100_000, Period: second}
	minute := algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 1000, Period: 60 * second}
	unreachable := algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 1_000_000_000, Period: second}
	for _, tc := range []struct {
		name  string
		l     algorithm.Limit
		keys  int
		every time.Duration // between two hits of a key
		hits  int           // per key
		// most is the most calls the cached store may make; strict makes
		// one per hit.
		most     int64
		reserves bool
	}{
		{"a bucket hit every 2 s", bucket, 1, 2 * time.Second, 30, 8, true},
		// Each key's one hit reserves what refills within an interval,
		// never given back: one call, as strict.
		{"many keys hit once", bucket, 100, time.Second, 1, 100, true},
		{"a minute's window hit every 5 s", minute, 1, 5 * time.Second, 36, 8, true},
		{"an unreachable bucket hit twice a second", unreachable, 1, 500 * time.Millisecond, 120, 6, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)))
				c := &counting{Store: memory.New(memory.Options{Now: time.Now})}
				_, s := newPair(t, cached.Options{Inner: c, Leaser: c})
				admitted := 0
				for range tc.hits {
					for k := range tc.keys {
						if apply(t, s, hitOn(fmt.Sprint(k), tc.l, 1)).Allowed {
							admitted++
						}
					}
					time.Sleep(tc.every)
				}
				synctest.Wait()
				calls := c.applies.Load() + c.reserves.Load() + c.returns.Load()
				t.Logf("%d hits: %d strict calls, %d reservations, %d returns", tc.keys*tc.hits, c.applies.Load(), c.reserves.Load(), c.returns.Load())
				if admitted != tc.keys*tc.hits || calls > tc.most || (c.reserves.Load() > 0) != tc.reserves {
					t.Fatalf("%d of %d hits admitted with %d calls; want all, with at most %d calls, reserving: %v",
						admitted, tc.keys*tc.hits, calls, tc.most, tc.reserves)
				}
			})
		})
	}
}
