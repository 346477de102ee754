package fleet_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/fleet"
	"github.com/tollgatehq/tollgate/pkg/signature"
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
//
// sig is the signature of wire under wireKey (computed apart, in Python):
// with --fleet-hmac-key-file a Bus publishes wire with "sig" added last.
var wireCases = []struct {
	name  string
	event fleet.Event
	wire  string
	sig   string
}{
	{
		name:  "overrides",
		event: fleet.Event{Overrides: true},
		wire:  `{"overrides":true,"origin":"` + wireOrigin + `"}`,
		sig:   "0ac60c4218ebc86c2b92a762455e8e183d6f58805a8e01af48a73024393b2689",
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
		sig: "c95c69a3a7168b4e764f0c55c28f90437bda18ee258e54a9ca82d0e1a46b7961",
	},
}

// wireKey is the key the golden signatures are made with.
const wireKey = "fleet-test-key-0123456789abcdef!"

// signed returns wire with the signature sig added, as package signature
// lays it out.
func signed(wire, sig string) string {
	return strings.TrimSuffix(wire, "}") + `,"sig":"` + sig + `"}`
}

// sign returns wire signed under wireKey, computed here as package
// signature specifies, apart from it: HMAC-SHA256 of the purpose, a zero
// byte and the message.
func sign(wire string) string {
	h := hmac.New(sha256.New, []byte(wireKey))
	h.Write([]byte("tollgate fleet event v1\x00" + wire))
	return signed(wire, hex.EncodeToString(h.Sum(nil)))
}

// mustKey returns the signature.Key of k.
func mustKey(t *testing.T, k string) *signature.Key {
	t.Helper()
	key, err := signature.NewKey([]byte(k))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TestWireFormat pins the bytes a Bus publishes for each kind of event,
// without a key and with one, and checks that a Bus hands on exactly the
// event those bytes stand for, so that instances of the versions before
// and after a change read each other's messages. A Bus without a key
// reads signed messages too.
func TestWireFormat(t *testing.T) {
	srv := redistest.StartStandalone(t)
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = raw.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	origin := regexp.MustCompile(`"origin":"([0-9a-f]{16})"`)
	for _, keyed := range []bool{false, true} {
		name := "publish"
		opts := fleet.Options{Channel: "test.fleet"}
		if keyed {
			name, opts.Key = "publish signed", mustKey(t, wireKey)
		}
		t.Run(name, func(t *testing.T) {
			sub := raw.Subscribe(ctx, "test.fleet")
			defer sub.Close()
			if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
				t.Fatal(err)
			}
			opts.Client = goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1})
			t.Cleanup(func() { _ = opts.Client.Close() })
			bus, err := fleet.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range wireCases {
				if err := bus.Publish(ctx, tc.event); err != nil {
					t.Fatal(err)
				}
				msg, err := sub.ReceiveMessage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				// The origin is the Bus's random id, which a signature
				// covers: pin its shape, then the rest byte for byte with
				// the origin the Bus sent.
				m := origin.FindStringSubmatch(msg.Payload)
				if m == nil {
					t.Fatalf("%s: no origin of 16 hex digits in %s", tc.name, msg.Payload)
				}
				want := strings.Replace(tc.wire, wireOrigin, m[1], 1)
				if keyed {
					want = sign(want)
				}
				if msg.Payload != want {
					t.Errorf("%s: published\n%s\nwant\n%s", tc.name, msg.Payload, want)
				}
			}
		})
	}

	for _, rc := range []struct {
		name   string
		key    *signature.Key
		signed bool
	}{
		{"receive", nil, false},
		{"receive signed", mustKey(t, wireKey), true},
		{"receive signed without a key", nil, true},
	} {
		t.Run(rc.name, func(t *testing.T) {
			l := listen(t, srv.Addr, func(o *fleet.Options) { o.Key = rc.key })
			for i, tc := range wireCases {
				wire := tc.wire
				if rc.signed {
					wire = signed(wire, tc.sig)
				}
				if err := raw.Publish(ctx, "test.fleet", wire).Err(); err != nil {
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
}
