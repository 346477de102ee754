package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// TestLeaseLocalClock checks that on the server's clock a lease's Until
// comes back on the local clock: no later than the server's Until would
// be locally, and no earlier than the call's start plus what was left of
// it.
func TestLeaseLocalClock(t *testing.T) {
	d := redistest.StandaloneDeployment(t)
	s := newStore(t, redis.Options{Client: d.Client(t), KeyPrefix: "lc"})
	ctx := context.Background()
	req := store.LeaseRequest{
		Counter: store.Hit{Domain: "d", Entries: []store.Entry{{Key: "k", Value: "v"}},
			Limit: algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 100, Period: 1_000_000}},
		Want: 10, Lifetime: 300 * time.Millisecond,
	}
	before := algorithm.Micros(time.Now())
	leases := make([]algorithm.Lease, 1)
	if err := s.Reserve(ctx, []store.LeaseRequest{req}, leases); err != nil {
		t.Fatal(err)
	}
	after := algorithm.Micros(time.Now())
	l := leases[0]
	if l.Hits != 10 {
		t.Fatalf("granted %d hits, want 10", l.Hits)
	}
	if l.Until < before+300_000 || l.Until > after+300_000 {
		t.Fatalf("Until %d is not within [%d, %d], the call's span plus the lifetime", l.Until, before+300_000, after+300_000)
	}
	// The window (the grant on the server's clock) still gives the hits
	// back.
	if err := s.Return(ctx, []store.LeaseReturn{{Counter: req.Counter, Lease: l, Unspent: 10}}); err != nil {
		t.Fatal(err)
	}
	got := make([]algorithm.Verdict, 1)
	if err := s.Apply(ctx, []store.Hit{req.Counter}, got); err != nil {
		t.Fatal(err)
	}
	if got[0].Remaining != 100 {
		t.Fatalf("after the return, a check reports %d remaining, want 100", got[0].Remaining)
	}
}

func TestReserveErrors(t *testing.T) {
	d := redistest.StandaloneDeployment(t)
	s := newStore(t, redis.Options{Client: d.Client(t), KeyPrefix: "le"})
	err := s.Reserve(context.Background(), make([]store.LeaseRequest, 2), make([]algorithm.Lease, 1))
	if want := "redis store: 1 leases for 2 lease requests"; err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	req := store.LeaseRequest{Counter: store.Hit{Domain: "d", Limit: algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 5, Period: 1_000_000}}, Want: 1}
	if err := s.Reserve(context.Background(), []store.LeaseRequest{req}, make([]algorithm.Lease, 1)); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Reserve after Close: %v, want an error wrapping store.ErrUnavailable", err)
	}
}

// BenchmarkReserveVsApply times, against one standalone server from one
// goroutine, a Reserve round trip (one lease of 100 hits) and an Apply
// round trip (one hit), alternating them so that both see the same
// machine, on token buckets that never run dry. It reports each one's
// ns per call and reserve/apply, their ratio.
func BenchmarkReserveVsApply(b *testing.B) {
	d := redistest.StandaloneDeployment(b)
	s := newStore(b, redis.Options{Client: d.Client(b), KeyPrefix: "bl"})
	ctx := context.Background()
	l := algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 1e12, Period: 1_000_000}
	entries := []store.Entry{{Key: "k", Value: "bench"}}
	hits := []store.Hit{{Domain: "apply", Entries: entries, Limit: l, Cost: 1}}
	verdicts := make([]algorithm.Verdict, 1)
	reqs := []store.LeaseRequest{{Counter: store.Hit{Domain: "reserve", Entries: entries, Limit: l}, Want: 100, Lifetime: time.Second}}
	leases := make([]algorithm.Lease, 1)
	if err := s.Apply(ctx, hits, verdicts); err != nil {
		b.Fatal(err)
	}
	var apply, reserve time.Duration
	b.ResetTimer()
	for i := range b.N {
		for k := range 2 {
			start := time.Now()
			var err error
			if (i+k)%2 == 0 {
				err = s.Apply(ctx, hits, verdicts)
				apply += time.Since(start)
			} else {
				err = s.Reserve(ctx, reqs, leases)
				reserve += time.Since(start)
				if err == nil && leases[0].Hits != 100 {
					b.Fatalf("granted %d hits, want 100", leases[0].Hits)
				}
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(apply.Nanoseconds())/float64(b.N), "apply-ns/op")
	b.ReportMetric(float64(reserve.Nanoseconds())/float64(b.N), "reserve-ns/op")
	b.ReportMetric(float64(reserve)/float64(apply), "reserve/apply")
}
