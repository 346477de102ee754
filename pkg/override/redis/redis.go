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
//
// # Signed records
//
// Whoever can write to Redis can write an override record, and an
// override changes limits: write access to Redis is admin access. With
// Options.Key (--fleet-hmac-key-file) Put signs every record (package
// signature: the JSON below with a "sig" member added last), and Load
// refuses every record without a valid signature: it is skipped, counted
// in tollgate_fleet_unsigned_refused_total{kind="override"} and logged,
// each once while it stays in Redis. Overrides stored before the key was
// set, or by an instance without it, are refused alike: create them
// again on an instance with the key. Delete removes a record whatever its
// signature, so that an operator can clear a refused one by its id. A
// signature says who wrote a record, not when: whoever can write to Redis
// can still put back a record a keyed instance wrote, until it expires.
//
// Without a key a record is the override in JSON, exactly as before
// signatures, and Load reads signed records too, ignoring their
// signature.
package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/signature"
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
	// Key, when set, signs every record Put writes and makes Load refuse
	// every record without a valid signature; nil writes unsigned records
	// and reads any, signed or not.
	Key *signature.Key
	// Logger gets a line for each record that does not decode, which Load
	// skips, and for each refused record; nil discards.
	Logger *slog.Logger
	// MeterProvider provides tollgate_fleet_unsigned_refused_total; nil
	// means a no-op provider.
	MeterProvider metric.MeterProvider
}

// Store is an override.Backend in Redis. It is safe for concurrent use.
type Store struct {
	client goredis.UniversalClient
	prefix string // prefix and tag
	ids    string
	now    func() time.Time
	log    *slog.Logger
	signer *signature.Key
	counts *signature.Refusals

	// mu guards refused: the ids of the records the last Load refused,
	// each logged and counted once while it stays.
	mu      sync.Mutex
	refused map[string]bool
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
	counts, err := signature.NewRefusals(opts.MeterProvider, "override")
	if err != nil {
		return nil, fmt.Errorf("override store: %w", err)
	}
	s := &Store{client: opts.Client, prefix: p + tag, ids: p + tag + "ids", now: opts.Now, signer: opts.Key, counts: counts}
	if s.now == nil {
		s.now = time.Now
	}
	s.log = opts.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "overrides")
	return s, nil
}

func (s *Store) key(id string) string { return s.prefix + "o:" + id }

// Put stores o with a TTL that ends at its ExpiresAt, signed if the
// Store has a key.
func (s *Store) Put(ctx context.Context, o override.Override) error {
	ttl := o.ExpiresAt.Sub(s.now())
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: expiry %s is in the past", override.ErrInvalid, o.ExpiresAt.Format(time.RFC3339))
	}
	data, err := encodeRecord(o)
	if err == nil && s.signer != nil {
		data, err = s.signer.Sign(signature.Override, data)
	}
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

// Delete removes the override with the id and returns it. It checks no
// signature: a refused record can be removed too.
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
// ones from the index. With a key it skips the records without a valid
// signature, and logs and counts each the first time it meets it.
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
	var refused map[string]error
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue // deleted or expired since
		}
		data := []byte(str)
		if s.signer != nil {
			if data, err = s.signer.Verify(signature.Override, data); err != nil {
				if refused == nil {
					refused = make(map[string]error)
				}
				refused[ids.Val()[i]] = err
				continue
			}
		}
		o, err := decodeRecord(data)
		if err != nil {
			// One bad record must not hide every other override.
			s.log.Warn("override record in redis does not decode; skipped", "id", ids.Val()[i], "error", err)
			continue
		}
		out = append(out, o)
	}
	if s.signer != nil {
		s.refuse(ctx, refused)
	}
	return out, nil
}

// refuse logs and counts the records of refused, by id, that the last
// Load did not refuse, and remembers them for the next.
func (s *Store) refuse(ctx context.Context, refused map[string]error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(refused)) {
		if s.refused[id] {
			continue
		}
		err := refused[id]
		s.counts.Add(ctx, err)
		s.log.LogAttrs(ctx, slog.LevelWarn, "override record in redis without a valid signature; refused",
			slog.String("id", id), slog.Any("error", err))
	}
	s.refused = make(map[string]bool, len(refused))
	for id := range refused {
		s.refused[id] = true
	}
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
