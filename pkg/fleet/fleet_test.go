package fleet_test

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/metrictest"
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

// listen runs a Bus on the channel test.fleet of the Redis at addr until
// the test ends; tweaks change its options.
func listen(t *testing.T, addr string, tweaks ...func(*fleet.Options)) *listener {
	t.Helper()
	client := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	opts := fleet.Options{Client: client, Channel: "test.fleet", Backoff: 10 * time.Millisecond, HealthCheck: 50 * time.Millisecond}
	for _, tweak := range tweaks {
		tweak(&opts)
	}
	bus, err := fleet.New(opts)
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

// TestSignedBus runs Buses with a key (--fleet-hmac-key-file) beside one
// without. The keyed listener refuses, counts and logs an unsigned event
// published on the channel by hand, one signed under another key and a
// signed one altered, and hands on the event of a Bus with its key; the
// Bus without a key hands on all of them.
func TestSignedBus(t *testing.T) {
	srv := redistest.StartStandalone(t)
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = raw.Close() })
	ctx := t.Context()
	key, wrong := mustKey(t, wireKey), mustKey(t, "another-key-0123456789abcdef0123")
	mp, metric := metrictest.New(t)
	var logs logtest.Buffer
	keyed := listen(t, srv.Addr, func(o *fleet.Options) {
		o.Key, o.MeterProvider, o.Logger = key, mp, slog.New(slog.NewTextHandler(&logs, nil))
	})
	unkeyed := listen(t, srv.Addr)
	peer := listen(t, srv.Addr, func(o *fleet.Options) { o.Key = key })
	stranger := listen(t, srv.Addr, func(o *fleet.Options) { o.Key = wrong })

	if err := raw.Publish(ctx, "test.fleet", `{"overrides":true,"origin":"forger"}`).Err(); err != nil {
		t.Fatal(err)
	}
	if err := stranger.bus.Publish(ctx, fleet.Event{Overrides: true}); err != nil {
		t.Fatal(err)
	}
	altered := strings.Replace(sign(`{"overrides":true,"origin":"signer"}`), "signer", "forger", 1)
	if err := raw.Publish(ctx, "test.fleet", altered).Err(); err != nil {
		t.Fatal(err)
	}
	counters := []store.Counter{{Domain: "d", Entries: []store.Entry{{Key: "k", Value: "v"}}, Shard: "v", Kind: algorithm.FixedWindow, Period: 60e6}}
	if err := peer.bus.Publish(ctx, fleet.Event{Reset: counters}); err != nil {
		t.Fatal(err)
	}
	// The channel keeps order: once the peer's event is handed on, the
	// three before it have been read.
	polltest.Eventually(t, 5*time.Second, func() bool { return len(keyed.received()) == 2 }, "the keyed Bus received %+v", keyed.received())
	if got := keyed.received(); !reflect.DeepEqual(got[1].Reset, counters) || got[1].Overrides {
		t.Fatalf("the keyed Bus received %+v, want a resync, then the peer's reset alone", got)
	}
	if got := metric("tollgate_fleet_unsigned_refused"); got != 3 {
		t.Errorf("tollgate_fleet_unsigned_refused = %d, want 3", got)
	}
	// The first refusal is logged, the others within a minute only counted.
	if got := strings.Count(logs.String(), "fleet event without a valid signature refused"); got != 1 ||
		!strings.Contains(logs.String(), "error=\"no signature\"") {
		t.Errorf("%d refusals logged, want the first (no signature):\n%s", got, logs.String())
	}
	polltest.Eventually(t, 5*time.Second, func() bool { return len(unkeyed.received()) == 5 }, "the Bus without a key received %+v", unkeyed.received())
}
