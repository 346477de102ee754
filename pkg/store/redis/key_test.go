package redis_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

func entries(kv ...string) []store.Entry {
	es := make([]store.Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, store.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

func TestKeyExamples(t *testing.T) {
	tb := limit(algorithm.TokenBucket, 10, time.Second)
	long := strings.Repeat("x", 65)
	longSum := sha256.Sum256([]byte(long))
	tests := []struct {
		name string
		hit  store.Hit
		want string
	}{
		{"typical", store.Hit{Domain: "api", Entries: entries("user", "u123"), Shard: "u123", Limit: tb},
			"tg{u123}api:user:t1s"},
		{"shard_by a later entry", store.Hit{Domain: "api", Entries: entries("user", "u1", "ep", "/search"), Shard: "/search", Limit: limit(algorithm.SlidingWindowCounter, 30, time.Minute)},
			"tg{/search}api:user=u1:ep:s1m"},
		{"shard equal to no entry: the first", store.Hit{Domain: "api", Entries: entries("user", "u1", "ep", "/x"), Shard: "other", Limit: tb},
			"tg{u1}api:user:ep=/x:t1s"},
		{"two entries with the shard value: the first", store.Hit{Domain: "d", Entries: entries("a", "v", "b", "v"), Shard: "v", Limit: tb},
			"tg{v}d:a:b=v:t1s"},
		{"separators and braces escaped", store.Hit{Domain: "a:b", Entries: entries("k=", "{x}|%"), Shard: "{x}|%", Limit: tb},
			"tg{%7Bx%7D%7C%25}a%3Ab:k%3D:t1s"},
		{"NUL, CR and LF escaped", store.Hit{Domain: "d\n", Entries: entries("k\r", "a\x00b\r\nc", "e", "\n"), Shard: "a\x00b\r\nc", Limit: tb},
			"tg{a%00b%0D%0Ac}d%0A:k%0D:e=%0A:t1s"},
		{"empty shard value", store.Hit{Domain: "d", Entries: entries("k", ""), Limit: tb},
			"tg{%}d:k:t1s"},
		{"empty entry value beside the shard", store.Hit{Domain: "d", Entries: entries("k", "v", "e", ""), Shard: "v", Limit: tb},
			"tg{v}d:k:e=:t1s"},
		{"no entries: the domain is the tag", store.Hit{Domain: "d", Limit: tb},
			"tg{d}d:t1s"},
		{"long value hashed", store.Hit{Domain: "d", Entries: entries("k", long), Shard: long, Limit: tb},
			"tg{%#" + base64.RawURLEncoding.EncodeToString(longSum[:16]) + "}d:k:t1s"},
		{"64 bytes kept", store.Hit{Domain: "d", Entries: entries("k", long[:64]), Shard: long[:64], Limit: tb},
			"tg{" + long[:64] + "}d:k:t1s"},
		{"fixed window per 5 minutes", store.Hit{Domain: "d", Entries: entries("k", "v"), Shard: "v", Limit: limit(algorithm.FixedWindow, 5, 5*time.Minute)},
			"tg{v}d:k:f5m"},
		{"sliding log per hour", store.Hit{Domain: "d", Entries: entries("k", "v"), Shard: "v", Limit: limit(algorithm.SlidingWindowLog, 5, time.Hour)},
			"tg{v}d:k:l1h"},
		{"day", store.Hit{Domain: "d", Entries: entries("k", "v"), Shard: "v", Limit: limit(algorithm.TokenBucket, 5, 48*time.Hour)},
			"tg{v}d:k:t2d"},
		{"week", store.Hit{Domain: "d", Entries: entries("k", "v"), Shard: "v", Limit: limit(algorithm.TokenBucket, 5, 7*24*time.Hour)},
			"tg{v}d:k:t1w"},
		{"milliseconds", store.Hit{Domain: "d", Entries: entries("k", "v"), Shard: "v", Limit: limit(algorithm.TokenBucket, 5, 1500*time.Millisecond)},
			"tg{v}d:k:t1500ms"},
		{"microseconds", store.Hit{Domain: "d", Entries: entries("k", "v"), Shard: "v", Limit: algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 1, Period: 1001}},
			"tg{v}d:k:t1001us"},
		{"unknown algorithm", store.Hit{Domain: "d", Entries: entries("k", "v"), Shard: "v", Limit: algorithm.Limit{Kind: 9, Period: 1e6}},
			"tg{v}d:k:x9.1s"},
		{"invalid period", store.Hit{Domain: "d", Entries: entries("k", "v"), Shard: "v", Limit: algorithm.Limit{Kind: algorithm.TokenBucket, Period: -5}},
			"tg{v}d:k:t-5us"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, slot := redis.Key("tg", &tt.hit)
			if got != tt.want {
				t.Errorf("Key = %q, want %q", got, tt.want)
			}
			if want := keySlot(got); slot != want {
				t.Errorf("slot = %d, want %d", slot, want)
			}
		})
	}
}

var update = flag.Bool("update", false, "rewrite testdata/keys.golden")

// keysGolden holds the keys TestKeysUnchanged pins.
var keysGolden = filepath.Join("testdata", "keys.golden")

// TestKeysUnchanged pins, byte for byte, the keys of every hostile value
// that holds no NUL, CR or LF byte: as the shard value, as the value of
// another entry, and as domain and entry key. Instances of two versions
// share counters during a rolling upgrade only while they build the same
// keys, so a change here must be deliberate (and said in the README); -update
// rewrites the file.
func TestKeysUnchanged(t *testing.T) {
	var b strings.Builder
	b.WriteString("# Keys of hostile values, pinned by TestKeysUnchanged: value, then its keys.\n")
	for _, v := range hostileValues {
		if strings.ContainsAny(v, "\x00\r\n") {
			continue
		}
		if len(v) <= maxGoldenValue {
			fmt.Fprintf(&b, "\nvalue %q\n", v)
		} else {
			fmt.Fprintf(&b, "\nvalue of %d bytes, SHA-256 %x\n", len(v), sha256.Sum256([]byte(v)))
		}
		for _, h := range []store.Hit{
			{Domain: "d", Entries: entries("k", v), Shard: v, Limit: limit(algorithm.TokenBucket, 10, time.Second)},
			{Domain: "d", Entries: entries("k", "s", "e", v), Shard: "s", Limit: limit(algorithm.FixedWindow, 10, time.Minute)},
			{Domain: v, Entries: entries(v, "s"), Shard: "s", Limit: limit(algorithm.SlidingWindowCounter, 10, time.Hour)},
		} {
			key, _ := redis.Key("tg", &h)
			fmt.Fprintf(&b, "%q\n", key)
		}
	}
	if *update {
		if err := os.WriteFile(keysGolden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(keysGolden)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got := b.String(); got != string(want) {
		gotLines, wantLines := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gotLines), len(wantLines)) {
			var g, w string
			if i < len(gotLines) {
				g = gotLines[i]
			}
			if i < len(wantLines) {
				w = wantLines[i]
			}
			if g != w {
				t.Fatalf("%s:%d: got %s, want %s", keysGolden, i+1, g, w)
			}
		}
	}
}

// maxGoldenValue is the longest value keys.golden spells out.
const maxGoldenValue = 70

// hostileValues are descriptor values built to collide, forge a tag or
// break a parser.
var hostileValues = []string{
	"", "a", "{", "}", "{}", "}{", "{a}", ":", "=", "|", "%", "%%", "%7B", "%7b", "%#", "%#AAAA", "a:b", "a=b",
	"a|b", "k=v:", "\x00", "\n", "\r", "\r\n", "a\x00b", "%00", "%0A", "\xff\xfe", "é", strings.Repeat("{", 64), strings.Repeat("}", 22),
	strings.Repeat("a", 64), strings.Repeat("a", 65), strings.Repeat("v", 4096), strings.Repeat("v", 4095) + "w",
}

// hostileHits returns hits over every combination of hostile domains,
// entry keys and values, one and two entries, each shard choice, and
// every algorithm.
func hostileHits() []store.Hit {
	small := []string{"", "{", "}", ":", "=", "%", "a", "a:b", "%3A", "\n", strings.Repeat("k", 70)}
	var hits []store.Hit
	for _, d := range []string{"d", "d:k", ""} {
		for _, k := range small {
			for _, v := range hostileValues {
				l := limit(algorithm.TokenBucket, 1, time.Second)
				hits = append(hits, store.Hit{Domain: d, Entries: entries(k, v), Shard: v, Limit: l})
				for _, v2 := range small {
					hits = append(hits,
						store.Hit{Domain: d, Entries: entries(k, v, "k2", v2), Shard: v, Limit: l},
						store.Hit{Domain: d, Entries: entries(k, v, "k2", v2), Shard: v2, Limit: l})
				}
			}
		}
	}
	for kind := algorithm.TokenBucket; kind <= algorithm.SlidingWindowLog; kind++ {
		for _, p := range []time.Duration{time.Microsecond, time.Millisecond, time.Second, 60 * time.Second, 61 * time.Second, time.Hour, 24 * time.Hour, 7 * 24 * time.Hour} {
			hits = append(hits, store.Hit{Domain: "d", Entries: entries("k", "v"), Shard: "v", Limit: limit(kind, 1, p)})
		}
	}
	return hits
}

// identity is what a key must tell apart: domain, entries, which entry
// holds the shard, algorithm and period.
func identity(h store.Hit) string {
	shardEntry := slices.IndexFunc(h.Entries, func(e store.Entry) bool { return e.Value == h.Shard })
	if shardEntry < 0 && len(h.Entries) > 0 {
		shardEntry = 0
	}
	return fmt.Sprintf("%q %q %d %d %d", h.Domain, h.Entries, shardEntry, h.Limit.Kind, h.Limit.Period)
}

// TestKeyInjective checks that distinct counters of hostile descriptors get
// distinct keys, that each key's hash tag, as Redis reads it, is its shard
// value, and that keys stay short for short values.
func TestKeyInjective(t *testing.T) {
	byKey := map[string]string{}
	for _, h := range hostileHits() {
		key, _ := redis.Key("tg", &h)
		id := identity(h)
		if other, ok := byKey[key]; ok && other != id {
			t.Fatalf("key %q for both\n %s\n %s", key, other, id)
		}
		byKey[key] = id
		if err := checkTag(key, "tg", h); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if err := checkFields(key); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if len(byKey) < 1000 {
		t.Fatalf("only %d distinct keys: the hostile set is too small", len(byKey))
	}
}

// redisTag returns the part of key Redis Cluster hashes: the content of the
// first {...} if it is not empty, else the whole key.
func redisTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// checkTag checks that the hash tag Redis reads from key is the encoded
// shard value of h: the slot cannot be chosen by any other value.
func checkTag(key, prefix string, h store.Hit) error {
	if !strings.HasPrefix(key, prefix+"{") {
		return fmt.Errorf("key %q does not start with %q", key, prefix+"{")
	}
	var want string
	switch i := slices.IndexFunc(h.Entries, func(e store.Entry) bool { return e.Value == h.Shard }); {
	case i >= 0:
		want = h.Shard
	case len(h.Entries) > 0:
		want = h.Entries[0].Value
	default:
		want = h.Domain
	}
	tag := redisTag(key)
	got, hashed, err := decodeField(tag)
	if err != nil {
		return fmt.Errorf("key %q: tag %q: %w", key, tag, err)
	}
	if tag == "%" {
		got = ""
	}
	if hashed {
		sum := sha256.Sum256([]byte(want))
		want = base64.RawURLEncoding.EncodeToString(sum[:16])
	}
	if got != want {
		return fmt.Errorf("key %q: tag %q reads as %q, want %q", key, tag, got, want)
	}
	if !strings.HasPrefix(key[len(prefix)+1+len(tag):], "}") {
		return fmt.Errorf("key %q: the tag does not end where the prefix's brace closes", key)
	}
	return nil
}

// checkFields checks that every field of key, from the tag on, decodes
// and is at most 64 bytes, so a key is short whatever the values.
func checkFields(key string) error {
	_, rest, _ := strings.Cut(key, "{")
	tag, rest, _ := strings.Cut(rest, "}")
	fields := []string{tag}
	for _, part := range strings.Split(rest, ":") {
		fields = append(fields, strings.Split(part, "=")...)
	}
	for _, f := range fields[:len(fields)-1] { // the last is the algorithm and period
		if len(f) > 64 {
			return fmt.Errorf("key %q: field %q is %d bytes", key, f, len(f))
		}
		if _, _, err := decodeField(f); err != nil {
			return fmt.Errorf("key %q: field %q: %w", key, f, err)
		}
	}
	return nil
}

// decodeField undoes the escaping of one key field; a hashed field returns
// its base64 digest and hashed set.
func decodeField(f string) (s string, hashed bool, err error) {
	if rest, ok := strings.CutPrefix(f, "%#"); ok {
		if len(rest) != 22 {
			return "", false, fmt.Errorf("hash of %d characters", len(rest))
		}
		return rest, true, nil
	}
	if f == "%" {
		return "", false, nil
	}
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		c := f[i]
		switch c {
		case '{', '}', ':', '=', '|', 0, '\r', '\n':
			return "", false, fmt.Errorf("raw %q at %d", c, i)
		case '%':
			if i+2 >= len(f) {
				return "", false, fmt.Errorf("short escape at %d", i)
			}
			n, err := strconv.ParseUint(f[i+1:i+3], 16, 8)
			if err != nil || strings.ToUpper(f[i+1:i+3]) != f[i+1:i+3] {
				return "", false, fmt.Errorf("bad escape %q", f[i:i+3])
			}
			b.WriteByte(byte(n))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), false, nil
}

// FuzzKey checks, for pairs of hits, that their keys are equal exactly when
// their counters are, that each key's Redis hash tag is its shard value,
// and that Key never panics.
func FuzzKey(f *testing.F) {
	f.Add("api", "user", "u1", "ep", "/x", uint8(0), uint8(1), int64(1e6), "api", "user", "u1", "ep", "/x", uint8(1), uint8(1), int64(1e6))
	f.Add("a", "b", "c", "", "", uint8(0), uint8(2), int64(60e6), "a", "b=c", "", "", "", uint8(0), uint8(2), int64(60e6))
	f.Add("d", "k", "}{", "x", "{", uint8(1), uint8(3), int64(1), "d", "k", "}", "x", "{{", uint8(0), uint8(3), int64(1))
	f.Add("d", "k", "%7B", "", "", uint8(0), uint8(4), int64(1000), "d", "k", "{", "", "", uint8(0), uint8(4), int64(1000))
	f.Add("d\n", "k\r", "a\x00b", "e", "\r\n", uint8(1), uint8(1), int64(1e6), "d%0A", "k%0D", "a%00b", "e", "%0D%0A", uint8(1), uint8(1), int64(1e6))
	f.Fuzz(func(t *testing.T,
		d1, k1, v1, k2, v2 string, shard1, kind1 uint8, period1 int64,
		d3, k3, v3, k4, v4 string, shard2, kind2 uint8, period2 int64) {
		h1 := fuzzHit(d1, k1, v1, k2, v2, shard1, kind1, period1)
		h2 := fuzzHit(d3, k3, v3, k4, v4, shard2, kind2, period2)
		key1, slot1 := redis.Key("tg", &h1)
		key2, slot2 := redis.Key("tg", &h2)
		if (key1 == key2) != (identity(h1) == identity(h2)) {
			t.Fatalf("keys %q and %q for\n %s\n %s", key1, key2, identity(h1), identity(h2))
		}
		for _, c := range []struct {
			key  string
			slot int
			h    store.Hit
		}{{key1, slot1, h1}, {key2, slot2, h2}} {
			if err := checkTag(c.key, "tg", c.h); err != nil {
				t.Fatal(err)
			}
			if err := checkFields(c.key); err != nil {
				t.Fatal(err)
			}
			if want := keySlot(c.key); c.slot != want {
				t.Fatalf("key %q: slot %d, want %d", c.key, c.slot, want)
			}
		}
		if redisTag(key1) == redisTag(key2) && slot1 != slot2 {
			t.Fatalf("keys %q and %q share a tag but not a slot", key1, key2)
		}
	})
}

// fuzzHit builds a hit of one or two entries; shard picks the entry whose
// value is the Shard (2 means a value of no entry).
func fuzzHit(d, k1, v1, k2, v2 string, shard, kind uint8, period int64) store.Hit {
	h := store.Hit{Domain: d, Entries: entries(k1, v1), Limit: algorithm.Limit{Kind: algorithm.Kind(kind % 6), Requests: 1, Period: period}}
	if k2 != "" || v2 != "" {
		h.Entries = append(h.Entries, store.Entry{Key: k2, Value: v2})
	}
	switch shard % 3 {
	case 0:
		h.Shard = v1
	case 1:
		h.Shard = h.Entries[len(h.Entries)-1].Value
	default:
		h.Shard = "\x00not an entry\x00"
	}
	return h
}

// keySlot computes a key's Redis Cluster slot as the Redis source does
// (CRC-16/XMODEM of the hash tag, bit by bit), independently of the
// package's table.
func keySlot(key string) int {
	var crc uint16
	for _, c := range []byte(redisTag(key)) {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}

// TestKeysOnCluster applies hostile hits through the store on a real
// cluster and checks with CLUSTER KEYSLOT that every key of a shard is in
// the shard's slot, the slot Key reports, and that each counter was
// written where the store looks for it.
func TestKeysOnCluster(t *testing.T) {
	d := redistest.ClusterDeployment(t)
	client := d.Client(t)
	s := newStore(t, redis.Options{Client: client, KeyPrefix: "h"})
	ctx := context.Background()
	byShard := map[string]int{}
	for _, v := range hostileValues {
		var hits []store.Hit
		for i, k := range []string{"a", "}", "{", ":", "="} {
			// A 30-day period: no fixed window ends, and so no key expires,
			// between the write and the EXISTS check below.
			l := limit(algorithm.Kind(1+i%4), 5, 30*24*time.Hour)
			hits = append(hits,
				store.Hit{Domain: "cl", Entries: entries(k, v), Shard: v, Limit: l, Cost: 1},
				store.Hit{Domain: "cl", Entries: entries("x", k, k, v), Shard: v, Limit: l, Cost: 1})
		}
		for i, vd := range apply(t, s, hits...) {
			if !vd.Allowed {
				t.Fatalf("value %q, hit %d: rejected: %+v", v, i, vd)
			}
		}
		for _, h := range hits {
			key, slot := redis.Key("h", &h)
			got, err := client.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatalf("CLUSTER KEYSLOT: %v", err)
			}
			if int(got) != slot {
				t.Fatalf("value %q: key %q in slot %d, Key says %d", v, key, got, slot)
			}
			if want, ok := byShard[v]; ok && want != slot {
				t.Fatalf("value %q: key %q in slot %d, another key of the shard in %d", v, key, slot, want)
			}
			byShard[v] = slot
			if n, err := client.Exists(ctx, key).Result(); err != nil || n != 1 {
				t.Fatalf("value %q: key %q not written (%d, %v)", v, key, n, err)
			}
		}
	}
}

func BenchmarkKey(b *testing.B) {
	for _, bm := range []struct {
		name string
		hit  store.Hit
	}{
		{"typical", store.Hit{Domain: "api", Entries: entries("user", "u123"), Shard: "u123", Limit: limit(algorithm.TokenBucket, 10, time.Second)}},
		{"three entries", store.Hit{Domain: "api", Entries: entries("api_key", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "endpoint", "/v1/search", "method", "GET"), Shard: "sk_live_4eC39HqLyjWDarjtT1zdp7dc", Limit: limit(algorithm.SlidingWindowCounter, 30, time.Minute)}},
		{"escaped", store.Hit{Domain: "api", Entries: entries("path", "/a:b/{c}"), Shard: "/a:b/{c}", Limit: limit(algorithm.FixedWindow, 10, time.Second)}},
		{"4KiB value", store.Hit{Domain: "api", Entries: entries("ua", strings.Repeat("v", 4096)), Shard: strings.Repeat("v", 4096), Limit: limit(algorithm.TokenBucket, 10, time.Second)}},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			var key string
			for b.Loop() {
				key, _ = redis.Key(redis.DefaultKeyPrefix, &bm.hit)
			}
			b.ReportMetric(float64(len(key)), "key-bytes")
		})
	}
}

var _ goredis.UniversalClient = (*goredis.ClusterClient)(nil)
