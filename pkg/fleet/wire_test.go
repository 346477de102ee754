package fleet_test

import (
	"context"
	"reflect"
	"regexp"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/fleet"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// wireOrigin stands for the publishing Bus's random id in the golden
// messages.
const wireOrigin = "0123456789abcdef"

// wireCases are the fleet's messages as they travel on the channel. The
// bytes are a contract between versions: during a rolling upgrade old and
// new instances share the channel, so each must read what the other
// publishes. A change here is a change of the wire format, which needs a
// version that reads both.
var wireCases = []struct {
	name  string
	event fleet.Event
	wire  string
}{
	{
		name:  "overrides",
		event: fleet.Event{Overrides: true},
		wire:  `{"overrides":true,"origin":"` + wireOrigin + `"}`,
	},
	{
		name: "reset",
		event: fleet.Event{Reset: []store.Counter{
			{
				Domain:  "api",
				Entries: []store.Entry{{Key: "api_key", Value: "k1"}, {Key: "endpoint", Value: "/search"}},
				Shard:   "k1",
				Kind:    algorithm.TokenBucket,
				Period:  1_000_000,
			},
			{
				// No shard: the field is left out.
				Domain:  "tiers",
				Entries: []store.Entry{{Key: "tier", Value: "free"}},
				Kind:    algorithm.SlidingWindowLog,
				Period:  60_000_000,
			},
			{
				// Values that JSON escapes, HTML-safe as encoding/json
				// writes them, and a hash tag's braces.
				Domain:  "d",
				Entries: []store.Entry{{Key: "k", Value: `a"b\c <&> é {x}`}},
				Shard:   "{x}",
				Kind:    algorithm.FixedWindow,
				Period:  3_600_000_000,
			},
			{
				Domain:  "d",
				Entries: []store.Entry{{Key: "k", Value: "v"}},
				Shard:   "v",
				Kind:    algorithm.SlidingWindowCounter,
				Period:  300_000_000,
			},
		}},
		wire: `{"reset":[` +
			`{"domain":"api","entries":[{"Key":"api_key","Value":"k1"},{"Key":"endpoint","Value":"/search"}],"shard":"k1","kind":1,"period_us":1000000},` +
			`{"domain":"tiers","entries":[{"Key":"tier","Value":"free"}],"kind":4,"period_us":60000000},` +
			`{"domain":"d","entries":[{"Key":"k","Value":"a\"b\\c \u003c\u0026\u003e é {x}"}],"shard":"{x}","kind":2,"period_us":3600000000},` +
			`{"domain":"d","entries":[{"Key":"k","Value":"v"}],"shard":"v","kind":3,"period_us":300000000}` +
			`],"origin":"` + wireOrigin + `"}`,
	},
}

// TestWireFormat pins the bytes a Bus publishes for each kind of event,
// and checks that a Bus hands on exactly the event those bytes stand for,
// so that instances of the versions before and after a change read each
// other's messages.
func TestWireFormat(t *testing.T) {
	srv := redistest.StartStandalone(t)
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = raw.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("publish", func(t *testing.T) {
		sub := raw.Subscribe(ctx, "test.fleet")
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
			t.Fatal(err)
		}
		client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1})
		t.Cleanup(func() { _ = client.Close() })
		bus, err := fleet.New(fleet.Options{Client: client, Channel: "test.fleet"})
		if err != nil {
			t.Fatal(err)
		}
		origin := regexp.MustCompile(`"origin":"[0-9a-f]{16}"`)
		for _, tc := range wireCases {
			if err := bus.Publish(ctx, tc.event); err != nil {
				t.Fatal(err)
			}
			msg, err := sub.ReceiveMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The origin is the Bus's random id: pin its shape, then the
			// rest byte for byte.
			got := origin.ReplaceAllString(msg.Payload, `"origin":"`+wireOrigin+`"`)
			if got == msg.Payload {
				t.Errorf("%s: no origin of 16 hex digits in %s", tc.name, msg.Payload)
			}
			if got != tc.wire {
				t.Errorf("%s: published\n%s\nwant\n%s", tc.name, got, tc.wire)
			}
		}
	})

	t.Run("receive", func(t *testing.T) {
		l := listen(t, srv.Addr)
		for i, tc := range wireCases {
			if err := raw.Publish(ctx, "test.fleet", tc.wire).Err(); err != nil {
				t.Fatal(err)
			}
			polltest.Eventually(t, 5*time.Second, func() bool { return len(l.received()) == i+2 }, "%s: not received", tc.name)
			got := l.received()[i+1] // after the subscription's resync
			want := tc.event
			want.Origin = wireOrigin
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: received %+v, want %+v", tc.name, got, want)
			}
		}
	})
}
