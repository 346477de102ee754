// Package redis shares the heavy-hitter summaries of a fleet that counts
// in Redis (--store redis): every instance publishes its own snapshot
// (package top) every few seconds, and any instance answers for the
// fleet by merging all of them (top.Options.Peers).
//
// # Keys
//
// All keys share the hash tag {%top}, so they live in one slot of a
// Cluster and one MGET reads them all; no counter key can have that
// tag (a counter's fields escape "%").
//
//   - prefix{%top}i:<instance> holds an instance's snapshot in its binary
//     form (top.Snapshot.MarshalBinary), with a TTL of Options.TTL, so
//     that an instance that stops publishing drops out of every answer
//     within it;
//   - prefix{%top}ids is a sorted set of the instances, scored by the
//     expiry of their key (Unix ms, by the publisher's clock), which
//     Peers reads instead of scanning keys; members whose key expired
//     long ago are removed as instances publish.
//
// # Bounds
//
// A published snapshot is at most Options.MaxBytes: one that would be
// larger is published with its summaries pruned to half the capacity,
// again and again, which loosens its bound to N/k for the k it took, as
// each answer's errors say; one too large even at a capacity of 1 (too
// many rule identities) is not published, and the failure is logged.
// Peers reads at most MaxInstances instances, skips values over MaxBytes
// and any that do not decode, and so keeps a query's memory bounded
// whatever Redis holds. Whoever can write to Redis can still make
// answers wrong, as they can make counters wrong: write access to Redis
// is admin access.
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/pkg/top"
)

// tag is the hash tag of every key.
const tag = "{%top}"

// The defaults of Options.
const (
	DefaultInterval = 5 * time.Second
	DefaultMaxBytes = 4 << 20
	// MaxInstances bounds the instances Peers reads.
	MaxInstances = 1024
)

// closeTimeout bounds the removal of the instance's key when Run ends.
const closeTimeout = time.Second

// Options configure a Fleet. Client and Instance are required.
type Options struct {
	Client goredis.UniversalClient
	// KeyPrefix starts every key, as the counters'; "" means "tg".
	KeyPrefix string
	// Instance names this instance's key; the same as the recorder's
	// (top.Options.Instance), so that Peers leaves it out.
	Instance string
	// Interval is how often Run publishes; 0 means DefaultInterval.
	Interval time.Duration
	// TTL is how long a published snapshot lives; 0 means three
	// Intervals. It must be longer than Interval.
	TTL time.Duration
	// MaxBytes bounds a snapshot published or read; 0 means
	// DefaultMaxBytes.
	MaxBytes int
	// Now is the clock of the index's scores; nil means time.Now.
	Now func() time.Time
	// Logger hears about snapshots not published or not decoded; nil
	// discards.
	Logger *slog.Logger
}

// Source gives the snapshot to publish: a top.Recorder.
type Source interface {
	Snapshot() *top.Snapshot
}

// Fleet publishes this instance's snapshot and reads the others'. It is
// safe for concurrent use.
type Fleet struct {
	client   goredis.UniversalClient
	prefix   string // prefix and tag
	ids      string
	instance string
	interval time.Duration
	ttl      time.Duration
	maxBytes int
	now      func() time.Time
	log      *slog.Logger

	// mu guards bad: the instances whose snapshot did not decode, each
	// logged once while it stays bad.
	mu  sync.Mutex
	bad map[string]bool
}

var _ top.Peers = (*Fleet)(nil)

// New returns a Fleet on opts.Client.
func New(opts Options) (*Fleet, error) {
	if opts.Client == nil {
		return nil, errors.New("top fleet: no redis client")
	}
	if opts.Instance == "" {
		return nil, errors.New("top fleet: no instance name")
	}
	p := opts.KeyPrefix
	if p == "" {
		p = "tg"
	}
	if strings.ContainsAny(p, "{}") {
		return nil, fmt.Errorf("top fleet: key prefix %q holds a brace", p)
	}
	f := &Fleet{client: opts.Client, prefix: p + tag, ids: p + tag + "ids", instance: opts.Instance,
		interval: opts.Interval, ttl: opts.TTL, maxBytes: opts.MaxBytes, now: opts.Now, log: opts.Logger}
	if f.interval == 0 {
		f.interval = DefaultInterval
	}
	if f.ttl == 0 {
		f.ttl = 3 * f.interval
	}
	if f.interval < 0 || f.ttl <= f.interval {
		return nil, fmt.Errorf("top fleet: interval %v and TTL %v: the TTL must be longer", f.interval, f.ttl)
	}
	if f.maxBytes == 0 {
		f.maxBytes = DefaultMaxBytes
	}
	if f.now == nil {
		f.now = time.Now
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	f.log = f.log.With("component", "top")
	return f, nil
}

func (f *Fleet) key(instance string) string { return f.prefix + "i:" + instance }

// ErrTooLarge reports a snapshot over MaxBytes even at a capacity of 1.
var ErrTooLarge = errors.New("snapshot too large")

// Publish stores snap as this instance's, with the TTL, pruned to fit
// MaxBytes.
func (f *Fleet) Publish(ctx context.Context, snap *top.Snapshot) error {
	data, err := snap.MarshalBinary()
	for err == nil && len(data) > f.maxBytes {
		if snap.Capacity <= 1 {
			return fmt.Errorf("publishing summaries: %w: %d bytes, over %d, for %d rule identities", ErrTooLarge, len(data), f.maxBytes, len(snap.Rules))
		}
		snap = snap.Prune(snap.Capacity / 2)
		data, err = snap.MarshalBinary()
	}
	if err != nil {
		return fmt.Errorf("encoding summaries: %w", err)
	}
	now := f.now()
	_, err = f.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Set(ctx, f.key(f.instance), data, f.ttl)
		p.ZAdd(ctx, f.ids, goredis.Z{Score: float64(now.Add(f.ttl).UnixMilli()), Member: f.instance})
		// Members whose key expired a TTL ago, by this clock.
		p.ZRemRangeByScore(ctx, f.ids, "-inf", "("+strconv.FormatInt(now.Add(-f.ttl).UnixMilli(), 10))
		return nil
	})
	if err != nil {
		return fmt.Errorf("publishing summaries to redis: %w", err)
	}
	return nil
}

// Run publishes src's snapshot now and every Interval until ctx ends,
// then removes this instance's key, so that it drops out of answers at
// once. A failure is logged, and the next interval tries again.
func (f *Fleet) Run(ctx context.Context, src Source) {
	tick := time.NewTicker(f.interval)
	defer tick.Stop()
	failing := false
	for {
		err := f.Publish(ctx, src.Snapshot())
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			f.log.Warn("publishing this instance's top summaries; the fleet's answers leave it out until it succeeds", "error", err)
			failing = true
		case err == nil && failing:
			f.log.Info("publishing this instance's top summaries again")
			failing = false
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
			defer cancel()
			_, _ = f.client.TxPipelined(dctx, func(p goredis.Pipeliner) error {
				p.Del(dctx, f.key(f.instance))
				p.ZRem(dctx, f.ids, f.instance)
				return nil
			})
			return
		case <-tick.C:
		}
	}
}

// Peers returns the snapshots the other instances published and that
// have not expired: at most MaxInstances, the latest to expire first.
// Snapshots over MaxBytes or that do not decode are skipped, and logged
// once while they stay so.
func (f *Fleet) Peers(ctx context.Context) ([]*top.Snapshot, error) {
	ids, err := f.client.ZRevRange(ctx, f.ids, 0, MaxInstances-1).Result()
	if err != nil {
		return nil, fmt.Errorf("reading the instances' ids from redis: %w", err)
	}
	var keys, names []string
	for _, id := range ids {
		if id != f.instance {
			keys, names = append(keys, f.key(id)), append(names, id)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	vals, err := f.client.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("reading the instances' summaries from redis: %w", err)
	}
	out := make([]*top.Snapshot, 0, len(vals))
	bad := map[string]error{}
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue // expired
		}
		if len(str) > f.maxBytes {
			bad[names[i]] = fmt.Errorf("%d bytes, over %d", len(str), f.maxBytes)
			continue
		}
		snap := &top.Snapshot{}
		if err := snap.UnmarshalBinary([]byte(str)); err != nil {
			bad[names[i]] = err
			continue
		}
		out = append(out, snap)
	}
	f.noteBad(bad)
	return out, nil
}

// noteBad logs the instances of bad that the last Peers did not find
// bad, and remembers them for the next.
func (f *Fleet) noteBad(bad map[string]error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, err := range bad {
		if !f.bad[name] {
			f.log.Warn("an instance's top summaries in redis are skipped", "instance", name, "error", err)
		}
	}
	f.bad = make(map[string]bool, len(bad))
	for name := range bad {
		f.bad[name] = true
	}
}
