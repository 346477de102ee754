// Package fleet tells the tollgate instances that share a Redis about the
// changes an operator makes on one of them, so that each can drop what it
// holds locally: the overrides changed (read them again), or counters were
// reset (forget their over-limit cache entries and leases).
//
// A Handler is the one owner of that forgetting on an instance. It hears
// the local events (a reload that changed the rules, an override change, a
// reset) and the remote ones (a Bus's events) alike, and asks the store
// chain (Local) to forget what they make stale. Without Redis there is no
// Bus, and the Handler applies the local events only.
//
// # Guarantees
//
// Events travel by Redis pub/sub on one channel (PUBLISH, which a Cluster
// delivers to subscribers on every node), so an instance that is
// subscribed hears of a change within a round trip. Pub/sub delivers at
// most once: an instance that is not subscribed when an event is
// published (Redis restarting, a network break, a start) misses it. Run
// therefore hands its handler a Resync event whenever it (re)subscribes;
// the handler reads the overrides again then, and the registry also reads
// them periodically. A missed reset leaves local state that ends by
// itself: an over-limit cache entry at its counter's RetryAfter, a lease
// with its window or lifetime.
//
// # Signed events
//
// Whoever can publish on the channel can send events; they make an
// instance read the overrides or forget what it holds of counters, which
// costs Redis round trips but never admits a hit. With Options.Key
// (--fleet-hmac-key-file) a Bus signs every event it publishes (package
// signature: the message below with a "sig" member added last) and
// refuses every event without a valid signature: it is dropped, counted
// in tollgate_fleet_unsigned_refused_total{kind="event"} and logged (the
// first, then at most one a minute). A signature says who wrote an
// event, not when: whoever can publish on the channel can repeat one
// heard there. Without a key a Bus publishes the message exactly as
// before signatures (TestWireFormat), and reads signed messages too,
// ignoring their signature, so that instances without the key still hear
// those with it while a key is rolled out.
package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"go.opentelemetry.io/otel/metric"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/signature"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// Event is one change on the fleet channel.
type Event struct {
	// Overrides says the overrides changed: read them again.
	Overrides bool
	// Reset names counters that were cleared.
	Reset []store.Counter
	// Resync is set on the event Run makes itself after subscribing,
	// never published: events may have been missed.
	Resync bool
	// Origin is the publishing Bus's random id; Run passes on no event of
	// its own Bus, whose instance has applied the change already.
	Origin string
}

// message is an Event as it travels on the channel, in JSON. Instances of
// different versions share the channel during a rolling upgrade, so these
// bytes change only with a version that reads both (TestWireFormat pins
// them).
type message struct {
	Overrides bool      `json:"overrides,omitempty"`
	Reset     []counter `json:"reset,omitempty"`
	Origin    string    `json:"origin"`
}

// counter is a store.Counter on the channel. Its entries are store.Entry
// values, which carry no JSON tags: they travel as {"Key":…,"Value":…}.
type counter struct {
	Domain  string         `json:"domain"`
	Entries []store.Entry  `json:"entries"`
	Shard   string         `json:"shard,omitempty"`
	Kind    algorithm.Kind `json:"kind"`
	Period  int64          `json:"period_us"`
}

// encode returns the message of e.
func encode(e Event) ([]byte, error) {
	m := message{Overrides: e.Overrides, Origin: e.Origin}
	if e.Reset != nil {
		m.Reset = make([]counter, len(e.Reset))
		for i, c := range e.Reset {
			m.Reset[i] = counter(c)
		}
	}
	return json.Marshal(m)
}

// decode returns the event of a message.
func decode(data []byte) (Event, error) {
	var m message
	if err := json.Unmarshal(data, &m); err != nil {
		return Event{}, err
	}
	e := Event{Overrides: m.Overrides, Origin: m.Origin}
	if m.Reset != nil {
		e.Reset = make([]store.Counter, len(m.Reset))
		for i, c := range m.Reset {
			e.Reset[i] = store.Counter(c)
		}
	}
	return e, nil
}

// Options configures a Bus. Client and Channel are required.
type Options struct {
	Client  goredis.UniversalClient
	Channel string
	// Backoff is the wait after a failed subscription before the next;
	// 0 means a second.
	Backoff time.Duration
	// HealthCheck is how long a quiet subscription waits before it pings
	// Redis, so that a connection lost without a word is noticed; 0 means
	// 15 seconds.
	HealthCheck time.Duration
	// Key, when set, signs every event published and refuses every event
	// received without a valid signature; nil publishes unsigned events
	// and reads any, signed or not.
	Key *signature.Key
	// Logger gets subscription failures and refused events; nil discards.
	Logger *slog.Logger
	// MeterProvider provides tollgate_fleet_unsigned_refused_total; nil
	// means a no-op provider.
	MeterProvider metric.MeterProvider
}

// refusedLogEvery is the least time between two log lines of refused
// events; the metric counts every one.
const refusedLogEvery = time.Minute

// Bus publishes and receives Events on one Redis pub/sub channel.
type Bus struct {
	id      string
	client  goredis.UniversalClient
	channel string
	backoff time.Duration
	health  time.Duration
	log     *slog.Logger
	key     *signature.Key
	refused *signature.Refusals
	// refusedLogged is when a refused event was last logged; only Run's
	// goroutine touches it.
	refusedLogged time.Time
	// subscribed is set while Run holds a confirmed subscription.
	subscribed atomic.Bool
}

// Subscribed reports whether Run holds a confirmed subscription, so that
// events published now reach this instance.
func (b *Bus) Subscribed() bool { return b.subscribed.Load() }

// New returns a Bus.
func New(opts Options) (*Bus, error) {
	if opts.Client == nil || opts.Channel == "" {
		return nil, errors.New("fleet: Client and Channel are required")
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	refused, err := signature.NewRefusals(opts.MeterProvider, "event")
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	b := &Bus{id: hex.EncodeToString(id[:]), client: opts.Client, channel: opts.Channel, backoff: opts.Backoff, log: opts.Logger,
		key: opts.Key, refused: refused}
	if b.backoff <= 0 {
		b.backoff = time.Second
	}
	b.health = opts.HealthCheck
	if b.health <= 0 {
		b.health = 15 * time.Second
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	b.log = b.log.With("component", "fleet")
	return b, nil
}

// Publish sends e to every other subscribed instance, signed if the Bus
// has a key.
func (b *Bus) Publish(ctx context.Context, e Event) error {
	e.Origin = b.id
	data, err := encode(e)
	if err == nil && b.key != nil {
		data, err = b.key.Sign(signature.Event, data)
	}
	if err != nil {
		return fmt.Errorf("fleet: encoding an event: %w", err)
	}
	if err := b.client.Publish(ctx, b.channel, data).Err(); err != nil {
		return fmt.Errorf("fleet: publishing an event: %w", err)
	}
	return nil
}

// Run subscribes to the channel and calls handle with every event, in
// order, until ctx ends; after each (re)subscription it calls handle with
// a Resync event. handle runs on Run's goroutine.
func (b *Bus) Run(ctx context.Context, handle func(context.Context, Event)) {
	for ctx.Err() == nil {
		if err := b.listen(ctx, handle); err != nil && ctx.Err() == nil {
			b.log.LogAttrs(ctx, slog.LevelWarn, "fleet channel lost; subscribing again", slog.Any("error", err))
			t := time.NewTimer(b.backoff)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// listen subscribes once and handles events until an error or ctx ends.
func (b *Bus) listen(ctx context.Context, handle func(context.Context, Event)) error {
	sub := b.client.Subscribe(ctx, b.channel)
	defer sub.Close()
	// A pub/sub read waits on the connection, not on ctx: closing the
	// subscription ends it.
	stop := context.AfterFunc(ctx, func() { _ = sub.Close() })
	defer stop()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		return err
	}
	b.subscribed.Store(true)
	defer b.subscribed.Store(false)
	handle(ctx, Event{Resync: true})
	pinged := false
	for {
		m, err := sub.ReceiveTimeout(ctx, b.health)
		var nerr net.Error
		if errors.As(err, &nerr) && nerr.Timeout() && ctx.Err() == nil {
			// Quiet: make sure the connection still stands, since a
			// dead or hung peer need not close it.
			if pinged {
				return errors.New("no answer to a ping within the health check interval")
			}
			if err := sub.Ping(ctx); err != nil {
				return fmt.Errorf("pinging the subscription: %w", err)
			}
			pinged = true
			continue
		}
		if err != nil {
			return err
		}
		pinged = false
		msg, ok := m.(*goredis.Message)
		if !ok {
			continue // a pong or a subscription change
		}
		data := []byte(msg.Payload)
		if b.key != nil {
			if data, err = b.key.Verify(signature.Event, data); err != nil {
				b.refuse(ctx, err, len(msg.Payload))
				continue
			}
		}
		e, err := decode(data)
		if err != nil {
			b.log.LogAttrs(ctx, slog.LevelWarn, "ignoring an event that cannot be decoded", slog.Any("error", err))
			continue
		}
		if e.Origin == b.id {
			continue
		}
		e.Resync = false
		handle(ctx, e)
	}
}

// refuse counts an event refused for its signature, and logs it unless
// another was logged within refusedLogEvery.
func (b *Bus) refuse(ctx context.Context, err error, size int) {
	b.refused.Add(ctx, err)
	if now := time.Now(); b.refusedLogged.IsZero() || now.Sub(b.refusedLogged) >= refusedLogEvery {
		b.refusedLogged = now
		b.log.LogAttrs(ctx, slog.LevelWarn, "fleet event without a valid signature refused; more within a minute are only counted",
			slog.Any("error", err), slog.Int("bytes", size))
	}
}
