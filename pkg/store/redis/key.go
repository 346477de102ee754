package redis

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// Keys.
//
// A counter's key is
//
//	prefix "{" tag "}" domain (":" entry)* ":" algorithm period
//
// for example tg{u123}api:user:t1s, the token bucket of one user of domain
// "api" refilling per second: 20 bytes. The parts:
//
//   - The tag is the value of the shard entry, the first entry whose value
//     equals Hit.Shard, or the first entry when none does. Redis hashes only
//     the tag, so every key of one shard lands in one slot. A hit with no
//     entries takes its domain as the tag.
//   - Each entry is key "=" value, except the shard entry, which is the key
//     alone: its value is the tag, not spelled out twice. Exactly one entry
//     has no "=", which tells where the shard entry is.
//   - The algorithm is one letter (t, f, s or l) and the period is an
//     integer and the largest unit that divides it exactly: w, d, h, m, s,
//     ms or us. A period has exactly one such form.
//
// Every domain, entry key, entry value and tag is a field: its bytes are
// kept except { } : = | and %, which become %XX (uppercase hex), so a field
// never holds a separator or a brace and splitting a key on ":" and "="
// recovers every field; NUL, CR and LF become %00, %0D and %0A too, so a
// key reads on one line in redis-cli, MONITOR and logs. (They were kept
// until tollgate escaped them: a counter of a value holding one moved to
// a new key then, and started empty.) A field longer than maxField bytes once escaped
// becomes %# and 22 base64url characters: the first 128 bits of the
// SHA-256 of its bytes. An empty tag is written "%", which no other field
// produces, because Redis ignores an empty {} and would hash the whole key.
//
// So the key names the domain, the entries, which entry is the shard entry,
// the algorithm and the period: two hits share a key exactly when these are
// equal (or a long field's SHA-256 collides). Hit.Shard chooses only the
// shard entry: a Shard equal to no entry value acts like the first entry's
// value, which is also what the limiter sends by default, so such a hit
// shares the counter of its descriptor whatever its Shard. Changing a
// domain's shard_by moves its counters to new keys: they start empty.
//
// The prefix may not hold a brace, so the first "{" of a key is the tag's,
// and the tag holds no "}": no descriptor value can choose another slot.

// maxField is the longest escaped field kept verbatim.
const maxField = 64

// hashedField is how a long field starts; no escaped field starts so.
const hashedField = "%#"

// keyScratch is the key length built without growing a buffer.
const keyScratch = 128

const upperHex = "0123456789ABCDEF"

// escaped holds the bytes of a field written as %XX.
var escaped = [256]bool{'{': true, '}': true, ':': true, '=': true, '|': true, '%': true, 0: true, '\r': true, '\n': true}

// appendField appends the escaped, or hashed, form of s.
func appendField(b []byte, s string) []byte {
	n := len(s)
	for i := 0; i < len(s) && n <= maxField; i++ {
		if escaped[s[i]] {
			n += 2
		}
	}
	if n > maxField {
		// Hashed through a small buffer: []byte(s) would copy s whole.
		h := sha256.New()
		var chunk [256]byte
		for rest := s; rest != ""; {
			n := copy(chunk[:], rest)
			h.Write(chunk[:n])
			rest = rest[n:]
		}
		var sum [sha256.Size]byte
		b = append(b, hashedField...)
		return base64.RawURLEncoding.AppendEncode(b, h.Sum(sum[:0])[:16])
	}
	if n == len(s) {
		return append(b, s...)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if escaped[c] {
			b = append(b, '%', upperHex[c>>4], upperHex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return b
}

// shardEntry returns the index of h's shard entry, or -1 when h has no
// entries.
func shardEntry(h *store.Hit) int {
	for i := range h.Entries {
		if h.Entries[i].Value == h.Shard {
			return i
		}
	}
	if len(h.Entries) == 0 {
		return -1
	}
	return 0
}

// kindCodes are the algorithm letters, indexed by algorithm.Kind.
var kindCodes = [...]byte{
	algorithm.TokenBucket:          't',
	algorithm.FixedWindow:          'f',
	algorithm.SlidingWindowCounter: 's',
	algorithm.SlidingWindowLog:     'l',
}

// periodUnits are the units a period is written in, largest first.
var periodUnits = [...]struct {
	us   int64
	name string
}{
	{7 * 24 * 3600e6, "w"}, {24 * 3600e6, "d"}, {3600e6, "h"}, {60e6, "m"}, {1e6, "s"}, {1e3, "ms"}, {1, "us"},
}

// appendKey appends the key of h's counter to b, which holds the prefix,
// and returns it with the bounds of the tag.
func appendKey(b []byte, h *store.Hit) (key []byte, tagStart, tagEnd int) {
	j := shardEntry(h)
	b = append(b, '{')
	tagStart = len(b)
	if j < 0 {
		b = appendField(b, h.Domain)
	} else {
		b = appendField(b, h.Entries[j].Value)
	}
	if len(b) == tagStart {
		b = append(b, '%')
	}
	tagEnd = len(b)
	b = append(b, '}')
	b = appendField(b, h.Domain)
	for i := range h.Entries {
		e := &h.Entries[i]
		b = append(b, ':')
		b = appendField(b, e.Key)
		if i != j {
			b = append(b, '=')
			b = appendField(b, e.Value)
		}
	}
	b = append(b, ':')
	if k := h.Limit.Kind; int(k) < len(kindCodes) && kindCodes[k] != 0 {
		b = append(b, kindCodes[k])
	} else {
		// Never stored (the script rejects the hit), but still distinct.
		b = append(b, 'x')
		b = strconv.AppendUint(b, uint64(k), 10)
		b = append(b, '.')
	}
	p := h.Limit.Period
	for _, u := range periodUnits {
		if p > 0 && p%u.us == 0 {
			b = strconv.AppendInt(b, p/u.us, 10)
			return append(b, u.name...), tagStart, tagEnd
		}
	}
	b = strconv.AppendInt(b, p, 10) // p ≤ 0: an invalid limit
	return append(b, "us"...), tagStart, tagEnd
}

// Key returns the Redis key of h's counter under prefix, and its hash slot
// in a Redis Cluster. It is what Store uses; tools and tests can call it to
// find a counter.
func Key(prefix string, h *store.Hit) (key string, slot int) {
	var scratch [keyScratch]byte
	b, start, end := appendKey(append(scratch[:0], prefix...), h)
	return string(b), int(crc16(b[start:end]) % slots)
}

// slots is the number of hash slots of a Redis Cluster.
const slots = 16384

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster takes modulo 16384 to
// find a key's slot.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^c]
	}
	return crc
}

// crcTable is the byte-wise table of CRC-16/XMODEM (polynomial 0x1021).
var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
