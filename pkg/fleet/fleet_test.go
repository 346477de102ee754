package fleet_test

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/fleet"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// listener runs a Bus and records the events it hands on.
type listener struct {
	bus    *fleet.Bus
	mu     sync.Mutex
	events []fleet.Event
}

func listen(t *testing.T, addr string) *listener {
	t.Helper()
	client := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	bus, err := fleet.New(fleet.Options{Client: client, Channel: "test.fleet", Backoff: 10 * time.Millisecond, HealthCheck: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l := &listener{bus: bus}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		bus.Run(ctx, func(_ context.Context, e fleet.Event) {
			l.mu.Lock()
			l.events = append(l.events, e)
			l.mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return within 5 s of its context's end")
		}
	})
	polltest.Eventually(t, 5*time.Second, bus.Subscribed, "not subscribed")
	return l
}

func (l *listener) received() []fleet.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]fleet.Event(nil), l.events...)
}

// TestBus checks that an event reaches the other instance, not the one
// that published it, with its counters intact, and that each
// subscription, the first and one after Redis restarts, is followed by a
// Resync event. A hung Redis, which keeps the connection open but answers
// nothing, ends the subscription too.
func TestBus(t *testing.T) {
	srv := redistest.StartStandalone(t)
	a, b := listen(t, srv.Addr), listen(t, srv.Addr)
	counters := []store.Counter{{Domain: "d", Entries: []store.Entry{{Key: "k", Value: "v"}}, Shard: "v",
		Kind: algorithm.SlidingWindowLog, Period: 60e6}}
	if err := a.bus.Publish(context.Background(), fleet.Event{Reset: counters}); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, time.Second, func() bool { return len(b.received()) == 2 }, "b received %+v", b.received())
	got := b.received()
	if !got[0].Resync || got[1].Resync || !reflect.DeepEqual(got[1].Reset, counters) {
		t.Fatalf("b received %+v, want a resync, then the reset of %+v", got, counters)
	}
	if got := a.received(); len(got) != 1 || !got[0].Resync {
		t.Fatalf("a received %+v, want only its resync", got)
	}

	srv.Restart()
	polltest.Eventually(t, 10*time.Second, func() bool { return len(b.received()) == 3 }, "no resync after a restart: %+v", b.received())
	if got := b.received(); !got[2].Resync {
		t.Fatalf("after the restart b received %+v, want a resync", got[2])
	}

	srv.Stop()
	polltest.Eventually(t, 5*time.Second, func() bool { return !b.bus.Subscribed() }, "a hung Redis goes unnoticed")
	srv.Continue()
	polltest.Eventually(t, 10*time.Second, func() bool { return len(b.received()) == 4 }, "no resync after a hang: %+v", b.received())
}
