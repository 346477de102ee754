package fleet_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
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

// local records what a Handler asks of an instance's local state, which
// holds the counters in held.
type local struct {
	mu      sync.Mutex
	held    []store.Counter
	forgot  [][]store.Counter
	dropped []store.Counter
	resets  int
}

var _ fleet.Local = (*local)(nil)

func (l *local) Forget(counters []store.Counter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgot = append(l.forgot, counters)
}

func (l *local) Drop(match func(store.Counter) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.held {
		if match(c) {
			l.dropped = append(l.dropped, c)
			n++
		}
	}
	return n
}

func (l *local) Reset() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resets++
	return len(l.held)
}

func (l *local) forgotten() [][]store.Counter {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]store.Counter(nil), l.forgot...)
}

// refresher counts the reads of the overrides and fails them with err.
type refresher struct {
	mu    sync.Mutex
	reads int
	err   error
}

func (r *refresher) Refresh(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	return r.err
}

func (r *refresher) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads
}

// lines returns a logger that writes text lines without their time into
// buf.
func lines(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
}

func counter(domain string, entries ...string) store.Counter {
	c := store.Counter{Domain: domain, Kind: algorithm.FixedWindow, Period: 60e6}
	for i := 0; i+1 < len(entries); i += 2 {
		c.Entries = append(c.Entries, store.Entry{Key: entries[i], Value: entries[i+1]})
	}
	return c
}

func TestPrefixCovers(t *testing.T) {
	c := counter("d", "tenant", "acme", "path", "/x")
	for _, tt := range []struct {
		name string
		p    fleet.Prefix
		want bool
	}{
		{"all of its entries", fleet.Prefix{Domain: "d", Entries: c.Entries}, true},
		{"its first entry", fleet.Prefix{Domain: "d", Entries: []store.Entry{{Key: "tenant", Value: "acme"}}}, true},
		{"no entries", fleet.Prefix{Domain: "d"}, true},
		{"another domain", fleet.Prefix{Domain: "e", Entries: []store.Entry{{Key: "tenant", Value: "acme"}}}, false},
		{"another value", fleet.Prefix{Domain: "d", Entries: []store.Entry{{Key: "tenant", Value: "other"}}}, false},
		{"another key", fleet.Prefix{Domain: "d", Entries: []store.Entry{{Key: "user", Value: "acme"}}}, false},
		{"its second entry only", fleet.Prefix{Domain: "d", Entries: []store.Entry{{Key: "path", Value: "/x"}}}, false},
		{"longer than its entries", fleet.Prefix{Domain: "d", Entries: append(append([]store.Entry(nil), c.Entries...), store.Entry{Key: "k", Value: "v"})}, false},
	} {
		if got := tt.p.Covers(c); got != tt.want {
			t.Errorf("%s: Covers = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestHandlerWithoutBus checks the events of an instance without Redis,
// which has no Bus: a reload and an override change still reach its local
// state, with their log lines, and a reset tells nobody.
func TestHandlerWithoutBus(t *testing.T) {
	acme, other := counter("d", "tenant", "acme"), counter("d", "tenant", "other")
	l := &local{held: []store.Counter{acme, other}}
	var buf bytes.Buffer
	h, err := fleet.NewHandler(fleet.HandlerOptions{Local: l, Logger: lines(&buf)})
	if err != nil {
		t.Fatal(err)
	}

	h.RulesChanged()
	if l.resets != 1 {
		t.Fatalf("a reload reset the local state %d times, want once", l.resets)
	}
	h.OverridesChanged([]fleet.Prefix{{Domain: "d", Entries: []store.Entry{{Key: "tenant", Value: "acme"}}}, {Domain: "e"}})
	if !reflect.DeepEqual(l.dropped, []store.Counter{acme}) {
		t.Fatalf("an override change dropped %+v, want %+v", l.dropped, acme)
	}
	h.Reset(context.Background(), []store.Hit{{Domain: "d", Entries: acme.Entries}})
	h.Run(context.Background()) // returns at once
	want := `level=INFO msg="descriptor configuration changed: cached counters forgotten, their leases returned" counters=2
level=INFO msg="overrides changed: leases of the counters they cover returned" counters=1
`
	if buf.String() != want {
		t.Fatalf("logged\n%s\nwant\n%s", buf.String(), want)
	}

	// Nothing held: nothing logged.
	buf.Reset()
	l.held = nil
	h.RulesChanged()
	h.OverridesChanged([]fleet.Prefix{{Domain: "d"}})
	if buf.Len() != 0 {
		t.Fatalf("logged %q with nothing held", buf.String())
	}

	// Nothing local at all (the memory store).
	h, err = fleet.NewHandler(fleet.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.RulesChanged()
	h.OverridesChanged([]fleet.Prefix{{Domain: "d"}})
	h.Handle(context.Background(), fleet.Event{Overrides: true, Reset: []store.Counter{acme}})
}

// TestHandlerHandle checks what an event from another instance does: an
// override change or a resync reads the overrides again, logging a
// failure; a reset forgets its counters.
func TestHandlerHandle(t *testing.T) {
	l := &local{}
	r := &refresher{err: errors.New("redis away")}
	var buf bytes.Buffer
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = client.Close() })
	bus, err := fleet.New(fleet.Options{Client: client, Channel: "test.fleet"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.NewHandler(fleet.HandlerOptions{Bus: bus}); err == nil {
		t.Fatal("NewHandler accepts a Bus without Overrides")
	}
	h, err := fleet.NewHandler(fleet.HandlerOptions{Bus: bus, Overrides: r, Local: l, Logger: lines(&buf)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h.Handle(ctx, fleet.Event{Overrides: true})
	h.Handle(ctx, fleet.Event{Resync: true})
	if r.count() != 2 {
		t.Fatalf("the overrides were read %d times, want 2", r.count())
	}
	want := `level=WARN msg="reading overrides after a change elsewhere; retrying at the next refresh" error="redis away"
`
	if buf.String() != want+want {
		t.Fatalf("logged\n%s\nwant twice\n%s", buf.String(), want)
	}
	reset := []store.Counter{counter("d", "tenant", "acme")}
	h.Handle(ctx, fleet.Event{Reset: reset})
	if got := l.forgotten(); !reflect.DeepEqual(got, [][]store.Counter{reset}) || r.count() != 2 {
		t.Fatalf("a reset forgot %+v and read the overrides %d times, want %+v and 2", got, r.count(), reset)
	}
}

// TestHandlerAcrossTheFleet checks, on a real Redis, that a reset on one
// instance makes the other forget its counters, not the first, and that
// each reads the overrides once it is subscribed.
func TestHandlerAcrossTheFleet(t *testing.T) {
	srv := redistest.StartStandalone(t)
	type instance struct {
		h     *fleet.Handler
		bus   *fleet.Bus
		local *local
		reads *refresher
	}
	start := func() instance {
		client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1})
		t.Cleanup(func() { _ = client.Close() })
		bus, err := fleet.New(fleet.Options{Client: client, Channel: "test.fleet", Backoff: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		in := instance{bus: bus, local: &local{}, reads: &refresher{}}
		if in.h, err = fleet.NewHandler(fleet.HandlerOptions{Bus: bus, Overrides: in.reads, Local: in.local}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			in.h.Run(ctx)
		}()
		t.Cleanup(func() {
			cancel()
			<-done
		})
		polltest.Eventually(t, 5*time.Second, func() bool { return bus.Subscribed() && in.reads.count() == 1 },
			"not subscribed, or the overrides not read after subscribing")
		return in
	}
	a, b := start(), start()
	hits := []store.Hit{{Domain: "d", Entries: []store.Entry{{Key: "tenant", Value: "acme"}}, Shard: "acme",
		Limit: algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 10, Period: 1e6}, Cost: 1}}
	a.h.Reset(context.Background(), hits)
	want := [][]store.Counter{{hits[0].Counter()}}
	polltest.Eventually(t, 5*time.Second, func() bool { return len(b.local.forgotten()) == 1 }, "the other instance forgot nothing")
	if got := b.local.forgotten(); !reflect.DeepEqual(got, want) {
		t.Fatalf("the other instance forgot %+v, want %+v", got, want)
	}
	if got := a.local.forgotten(); len(got) != 0 {
		t.Fatalf("the resetting instance forgot %+v from its own event", got)
	}
}
