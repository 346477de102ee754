package top

import (
	"encoding/binary"
	"errors"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// A value's identity in a summary is its descriptor entries encoded as
// one string: for each entry, the length of its key as a uvarint, the
// key, the length of its value as a uvarint and the value. Lengths make
// the encoding unambiguous whatever bytes keys and values hold, and it
// costs one or two bytes an entry over the bytes themselves.

// appendEntries appends entries, encoded, to buf.
func appendEntries(buf []byte, entries []descriptor.Entry) []byte {
	for i := range entries {
		e := &entries[i]
		buf = appendString(buf, e.Key)
		buf = appendString(buf, e.Value)
	}
	return buf
}

// appendString appends s with its length as a uvarint.
func appendString(buf []byte, s string) []byte {
	if len(s) < 0x80 {
		buf = append(buf, byte(len(s)))
	} else {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
	}
	return append(buf, s...)
}

// errBadKey reports an encoded value that does not decode.
var errBadKey = errors.New("malformed descriptor entries")

// decodeEntries returns the entries encoded in key.
func decodeEntries(key string) ([]descriptor.Entry, error) {
	n, err := countEntries(key)
	if err != nil {
		return nil, err
	}
	out := make([]descriptor.Entry, 0, n)
	for len(key) > 0 {
		var k, v string
		k, key, _ = cutString(key)
		v, key, _ = cutString(key)
		out = append(out, descriptor.Entry{Key: k, Value: v})
	}
	return out, nil
}

// countEntries returns how many entries key encodes, or errBadKey.
func countEntries(key string) (int, error) {
	n := 0
	for len(key) > 0 {
		var ok bool
		if _, key, ok = cutString(key); !ok {
			return 0, errBadKey
		}
		if _, key, ok = cutString(key); !ok {
			return 0, errBadKey
		}
		n++
	}
	return n, nil
}

// cutString splits one length-prefixed string off the front of s.
func cutString(s string) (field, rest string, ok bool) {
	n, w := uvarint(s)
	if w <= 0 || n > uint64(len(s)-w) {
		return "", s, false
	}
	return s[w : w+int(n)], s[w+int(n):], true
}

// uvarint is binary.Uvarint on a string.
func uvarint(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		b := s[i]
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 {
				return 0, -1
			}
			return x | uint64(b)<<shift, i + 1
		}
		x |= uint64(b&0x7f) << shift
		shift += 7
	}
	return 0, 0
}

// uvarintLen returns the length of x as a uvarint.
func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}
