// Package redis keeps the overrides of a fleet that counts in Redis
// (--store redis): every instance reads and writes the same ones.
//
// # Keys
//
// All keys share the hash tag {%overrides}, so they live in one slot of a
// Cluster and one MULTI changes them together. No counter key can have that
// tag: a counter's fields escape "%" as %25 (see package store/redis).
//
//   - prefix{%overrides}o:<id> holds an override as JSON, with a TTL that
//     ends at its ExpiresAt, so Redis forgets it when it expires;
//   - prefix{%overrides}ids is a sorted set of the ids, scored by expiry
//     (Unix ms), which Load reads instead of scanning keys; expired members
//     are removed as Load meets them.
//
// Redis does not tell the instances of a change; the registry publishes
// one on the fleet channel (package fleet) and reads everything again
// periodically.
package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/pkg/override"
)

// tag is the hash tag of every key.
const tag = "{%overrides}"

// Options configures a Store. Client is required.
type Options struct {
	Client goredis.UniversalClient
	// KeyPrefix starts every key, as the counters'; "" means "tg".
	KeyPrefix string
	// Now is the clock TTLs are computed with; nil means time.Now.
	Now func() time.Time
	// Logger gets a line for each record that does not decode, which Load
	// skips; nil discards.
	Logger *slog.Logger
}

// Store is an override.Backend in Redis. It is safe for concurrent use.
type Store struct {
	client goredis.UniversalClient
	prefix string // prefix and tag
	ids    string
	now    func() time.Time
	log    *slog.Logger
}

var _ override.Backend = (*Store)(nil)

// New returns a Store on opts.Client.
func New(opts Options) (*Store, error) {
	if opts.Client == nil {
		return nil, errors.New("override store: no redis client")
	}
	p := opts.KeyPrefix
	if p == "" {
		p = "tg"
	}
	if strings.ContainsAny(p, "{}") {
		return nil, fmt.Errorf("override store: key prefix %q holds a brace", p)
	}
	s := &Store{client: opts.Client, prefix: p + tag, ids: p + tag + "ids", now: opts.Now}
	if s.now == nil {
		s.now = time.Now
	}
	s.log = opts.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

func (s *Store) key(id string) string { return s.prefix + "o:" + id }

// Put stores o with a TTL that ends at its ExpiresAt.
func (s *Store) Put(ctx context.Context, o override.Override) error {
	ttl := o.ExpiresAt.Sub(s.now())
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: expiry %s is in the past", override.ErrInvalid, o.ExpiresAt.Format(time.RFC3339))
	}
	data, err := encodeRecord(o)
	if err != nil {
		return fmt.Errorf("encoding override: %w", err)
	}
	_, err = s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Set(ctx, s.key(o.ID), data, ttl)
		p.ZAdd(ctx, s.ids, goredis.Z{Score: float64(o.ExpiresAt.UnixMilli()), Member: o.ID})
		return nil
	})
	if err != nil {
		return fmt.Errorf("storing override in redis: %w", err)
	}
	return nil
}

// Delete removes the override with the id and returns it.
func (s *Store) Delete(ctx context.Context, id string) (override.Override, error) {
	var get *goredis.StringCmd
	_, err := s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		get = p.Get(ctx, s.key(id))
		p.Del(ctx, s.key(id))
		p.ZRem(ctx, s.ids, id)
		return nil
	})
	if errors.Is(err, goredis.Nil) {
		return override.Override{}, override.ErrNotFound
	}
	if err != nil {
		return override.Override{}, fmt.Errorf("deleting override in redis: %w", err)
	}
	o, err := decodeRecord([]byte(get.Val()))
	if err != nil {
		return override.Override{}, fmt.Errorf("decoding override %s: %w", id, err)
	}
	return o, nil
}

// Load returns every override Redis holds, and removes the ids of expired
// ones from the index.
func (s *Store) Load(ctx context.Context) ([]override.Override, error) {
	now := strconv.FormatInt(s.now().UnixMilli(), 10)
	var ids *goredis.StringSliceCmd
	_, err := s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, s.ids, "-inf", now)
		ids = p.ZRange(ctx, s.ids, 0, -1)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading override ids from redis: %w", err)
	}
	if len(ids.Val()) == 0 {
		return nil, nil
	}
	keys := make([]string, len(ids.Val()))
	for i, id := range ids.Val() {
		keys[i] = s.key(id)
	}
	vals, err := s.client.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("reading overrides from redis: %w", err)
	}
	out := make([]override.Override, 0, len(vals))
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue // deleted or expired since
		}
		o, err := decodeRecord([]byte(str))
		if err != nil {
			// One bad record must not hide every other override.
			s.log.Warn("override record in redis does not decode; skipped", "id", ids.Val()[i], "error", err)
			continue
		}
		out = append(out, o)
	}
	return out, nil
}

// encodeRecord returns the record Redis holds for o: o in JSON.
func encodeRecord(o override.Override) ([]byte, error) { return json.Marshal(o) }

// decodeRecord returns the override of a record that Redis holds. Anyone
// who can write to Redis writes records, so it must take any bytes.
func decodeRecord(data []byte) (override.Override, error) {
	var o override.Override
	if err := json.Unmarshal(data, &o); err != nil {
		return override.Override{}, err
	}
	return o, nil
}
