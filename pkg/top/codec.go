package top

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// The binary form of a Snapshot, as instances publish it:
//
//	"TGT1"                         magic and version
//	instance                       string: uvarint length, bytes
//	time                           uvarint, Unix milliseconds
//	capacity                       uvarint, 1 to MaxCapacity
//	rules                          uvarint count, then each, sorted by ID:
//	  domain, rule, limit          strings
//	  requests per unit, period    uvarints, period in milliseconds
//	  3 windows (5m, 1m, 1h)       span in milliseconds (uvarint), then the
//	                               requests' and the rejections' summary
//
// and a summary is its total, its delta, and its entry count (at most
// the capacity) as uvarints, then each entry, sorted by key: the key (a
// string, the encoded descriptor entries) and its counter and lower
// bound as uvarints. Every uvarint is in its shortest form, so a
// snapshot has one encoding: decoding then encoding gives the same
// bytes.
//
// Decoding checks what the merge relies on, so that nothing another
// instance (or anyone who can write to Redis) publishes can make it
// panic, allocate beyond the size of the input or break the bound of an
// answer without lying about totals: the counts fit the totals (every
// lower bound at most its upper bound, the lower bounds adding up to at
// most the total, and Σc + capacity·delta ≤ total), the keys decode to
// descriptor entries, and nothing is left over.

const magic = "TGT1"

// Bounds of a decoded snapshot beyond what its size bounds.
const (
	maxPeriod = 1 << 45 // milliseconds: over a thousand years
	maxSpan   = 1 << 32 // milliseconds: over a month
)

// ErrMalformed reports a snapshot that does not decode; errors that wrap
// it say why.
var ErrMalformed = errors.New("malformed snapshot")

// MarshalBinary encodes s.
func (s *Snapshot) MarshalBinary() ([]byte, error) {
	buf := make([]byte, 0, 256)
	buf = append(buf, magic...)
	buf = appendString(buf, s.Instance)
	buf = binary.AppendUvarint(buf, uint64(max(s.Time.UnixMilli(), 0)))
	buf = binary.AppendUvarint(buf, uint64(s.Capacity))
	buf = binary.AppendUvarint(buf, uint64(len(s.Rules)))
	for i := range s.Rules {
		rs := &s.Rules[i]
		buf = appendString(buf, rs.ID.Domain)
		buf = appendString(buf, rs.ID.Rule)
		buf = appendString(buf, rs.ID.Limit)
		buf = binary.AppendUvarint(buf, uint64(rs.RequestsPerUnit))
		buf = binary.AppendUvarint(buf, uint64(max(rs.Period.Milliseconds(), 0)))
		for w := range rs.windows {
			ws := &rs.windows[w]
			buf = binary.AppendUvarint(buf, uint64(max(ws.span.Milliseconds(), 0)))
			buf = appendSummary(buf, ws.req)
			buf = appendSummary(buf, ws.rej)
		}
	}
	return buf, nil
}

func appendSummary(buf []byte, s *summary) []byte {
	if s == nil {
		s = &summary{}
	}
	buf = binary.AppendUvarint(buf, s.total)
	buf = binary.AppendUvarint(buf, s.delta)
	buf = binary.AppendUvarint(buf, uint64(len(s.entries)))
	for _, e := range s.entries {
		buf = appendString(buf, e.key)
		buf = binary.AppendUvarint(buf, e.c)
		buf = binary.AppendUvarint(buf, e.lo)
	}
	return buf
}

// UnmarshalBinary decodes a snapshot MarshalBinary encoded into s. It
// returns an error wrapping ErrMalformed, and leaves s as it was, for
// anything else.
func (s *Snapshot) UnmarshalBinary(data []byte) error {
	d := decoder{s: string(data)}
	snap, err := d.snapshot()
	if err != nil {
		return fmt.Errorf("%w: %w at byte %d", ErrMalformed, err, d.off)
	}
	*s = *snap
	return nil
}

type decoder struct {
	s   string
	off int
}

func (d *decoder) rest() string { return d.s[d.off:] }

func (d *decoder) uvarint() (uint64, error) {
	x, w := uvarint(d.rest())
	if w <= 0 {
		return 0, errors.New("bad uvarint")
	}
	if uvarintLen(x) != w {
		return 0, errors.New("uvarint not in its shortest form")
	}
	d.off += w
	return x, nil
}

// bounded reads a uvarint of at most limit.
func (d *decoder) bounded(what string, limit uint64) (uint64, error) {
	x, err := d.uvarint()
	if err == nil && x > limit {
		err = fmt.Errorf("%s %d is over %d", what, x, limit)
	}
	return x, err
}

func (d *decoder) string() (string, error) {
	n, err := d.uvarint()
	if err != nil {
		return "", err
	}
	if n > uint64(len(d.rest())) {
		return "", fmt.Errorf("string length %d is over the %d bytes left", n, len(d.rest()))
	}
	out := d.s[d.off : d.off+int(n)]
	d.off += int(n)
	return out, nil
}

func (d *decoder) snapshot() (*Snapshot, error) {
	if len(d.s) < len(magic) || d.s[:len(magic)] != magic {
		return nil, errors.New("no TGT1 header")
	}
	d.off = len(magic)
	snap := &Snapshot{}
	var err error
	if snap.Instance, err = d.string(); err != nil {
		return nil, err
	}
	ms, err := d.bounded("time", uint64(math.MaxInt64/int64(time.Millisecond)))
	if err != nil {
		return nil, err
	}
	snap.Time = time.UnixMilli(int64(ms))
	k, err := d.bounded("capacity", MaxCapacity)
	if err != nil {
		return nil, err
	}
	if k == 0 {
		return nil, errors.New("capacity 0")
	}
	snap.Capacity = int(k)
	// A rule takes at least 3 strings, 2 uvarints and 3 windows of 7
	// uvarints: 26 bytes.
	n, err := d.bounded("rule count", uint64(len(d.rest())/26))
	if err != nil {
		return nil, err
	}
	snap.Rules = make([]RuleSnapshot, n)
	for i := range snap.Rules {
		rs := &snap.Rules[i]
		if err := d.rule(rs, snap.Capacity); err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		if i > 0 && compareIDs(snap.Rules[i-1].ID, rs.ID) >= 0 {
			return nil, fmt.Errorf("rule %d: not sorted after the one before", i)
		}
	}
	if d.off != len(d.s) {
		return nil, errors.New("trailing bytes")
	}
	return snap, nil
}

func (d *decoder) rule(rs *RuleSnapshot, k int) error {
	var err error
	for _, f := range []*string{&rs.ID.Domain, &rs.ID.Rule, &rs.ID.Limit} {
		if *f, err = d.string(); err != nil {
			return err
		}
	}
	rpu, err := d.bounded("requests per unit", math.MaxUint32)
	if err != nil {
		return err
	}
	period, err := d.bounded("period", maxPeriod)
	if err != nil {
		return err
	}
	rs.RequestsPerUnit, rs.Period = uint32(rpu), time.Duration(period)*time.Millisecond
	for w := range rs.windows {
		ws := &rs.windows[w]
		span, err := d.bounded("span", maxSpan)
		if err != nil {
			return err
		}
		ws.span = time.Duration(span) * time.Millisecond
		if ws.req, err = d.summary(k); err != nil {
			return fmt.Errorf("window %s, requests: %w", Window(w), err)
		}
		if ws.rej, err = d.summary(k); err != nil {
			return fmt.Errorf("window %s, rejections: %w", Window(w), err)
		}
	}
	return nil
}

func (d *decoder) summary(k int) (*summary, error) {
	s := &summary{}
	var err error
	if s.total, err = d.uvarint(); err != nil {
		return nil, err
	}
	if s.delta, err = d.bounded("delta", s.total/uint64(k)); err != nil {
		return nil, err
	}
	// An entry takes at least 4 bytes: a key of one entry, c and lo.
	n, err := d.bounded("entry count", min(uint64(k), uint64(len(d.rest())/4)))
	if err != nil {
		return nil, err
	}
	s.entries = make([]entry, n)
	budget := s.total - uint64(k)*s.delta // what Σc may take
	var los uint64
	for i := range s.entries {
		e := &s.entries[i]
		if e.key, err = d.string(); err != nil {
			return nil, err
		}
		if err := checkKey(e.key); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		if i > 0 && s.entries[i-1].key >= e.key {
			return nil, fmt.Errorf("entry %d: not sorted after the one before", i)
		}
		if e.c, err = d.bounded("counter", budget); err != nil {
			return nil, fmt.Errorf("entry %d: %w (the total less capacity × delta, less the counters before)", i, err)
		}
		budget -= e.c
		if e.lo, err = d.bounded("lower bound", s.hi(e)); err != nil {
			return nil, fmt.Errorf("entry %d: %w (its upper bound)", i, err)
		}
		if los = satAdd(los, e.lo); los > s.total {
			return nil, fmt.Errorf("entry %d: lower bounds add up to over the total %d", i, s.total)
		}
	}
	return s, nil
}

// checkKey reports whether key is a non-empty canonical encoding of
// descriptor entries.
func checkKey(key string) error {
	if key == "" {
		return errors.New("empty descriptor")
	}
	rest := key
	for len(rest) > 0 {
		for range 2 {
			n, w := uvarint(rest)
			if w <= 0 || uvarintLen(n) != w || n > uint64(len(rest)-w) {
				return errBadKey
			}
			rest = rest[w+int(n):]
		}
	}
	return nil
}
