package top

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// seedSnapshots returns the encodings of a few real snapshots: empty, one
// rule identity, and several with evictions, an override and values
// with odd bytes.
func seedSnapshots(tb testing.TB) [][]byte {
	c := &clock{t: t0}
	var out [][]byte
	add := func(r *Recorder) {
		data, err := r.Snapshot().MarshalBinary()
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, data)
	}
	r := newRecorder(tb, 2, c, nil)
	add(r)
	r.Record(t0, "api", "api_key", "per_key", perMinute, client("a"), 3, true)
	add(r)
	for i := range 20 {
		c.Set(t0.Add(time.Duration(i) * 7 * time.Second))
		r.Record(c.Now(), "api", "api_key", "per_key", perMinute, client(string(rune('a'+i%5))), uint64(i), i%3 == 0)
		r.Record(c.Now(), "api", "", OverrideLimit, nil, []descriptor.Entry{{Key: "", Value: "\x00\xff"}, {Key: "k", Value: ""}}, 1, false)
	}
	add(r)
	return out
}

// FuzzSnapshot decodes arbitrary bytes as a snapshot another instance
// published, as Peers reads whatever a writer to Redis left there. It
// asserts that decoding never panics and never holds more entries than
// the input has bytes for; that a snapshot it decodes encodes to the
// same bytes; and that merging it into an answer does not panic and
// keeps every count's error within the count.
func FuzzSnapshot(f *testing.F) {
	for _, seed := range seedSnapshots(f) {
		f.Add(seed)
		f.Add(seed[:len(seed)/2])
	}
	f.Add([]byte("TGT1"))
	f.Add([]byte("TGT1\x00\x00\x01\x01\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\x0f"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Snapshot
		if err := s.UnmarshalBinary(data); err != nil {
			return
		}
		n := 0
		for _, rs := range s.Rules {
			for _, w := range rs.windows {
				n += len(w.req.entries) + len(w.rej.entries)
			}
		}
		if n*4 > len(data) {
			t.Fatalf("%d entries decoded from %d bytes", n, len(data))
		}
		again, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("decoded and encoded again:\n%q\nfrom\n%q", again, data)
		}
		c := &clock{t: s.Time}
		r := newRecorder(t, 4, c, peersFunc(func(context.Context) ([]*Snapshot, error) { return []*Snapshot{&s}, nil }))
		for _, by := range []By{ByRequests, ByRejected} {
			for w := range Window(numWindows) {
				ans := top(t, r, Query{By: by, Window: w, Limit: 100})
				for _, e := range ans.Entries {
					if e.RequestsError > e.Requests || e.RejectedError > e.Rejected || len(e.Descriptor) == 0 {
						t.Fatalf("entry %+v", e)
					}
				}
			}
		}
		r.Rules(context.Background(), RulesQuery{})
	})
}

// TestSnapshotRoundTrip checks that real snapshots decode to what was
// encoded, and that decoding refuses each kind of malformed input with
// its reason.
func TestSnapshotRoundTrip(t *testing.T) {
	for _, data := range seedSnapshots(t) {
		var s Snapshot
		if err := s.UnmarshalBinary(data); err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		again, _ := s.MarshalBinary()
		if !bytes.Equal(again, data) {
			t.Errorf("round trip:\n%q\n%q", again, data)
		}
	}
	// withSummary returns a snapshot of capacity 2 whose one rule has
	// summary as its 5m requests' (from byte 14), and empty ones else.
	withSummary := func(summary string) string {
		const empty = "\x00\x00\x00"
		return "TGT1\x00\x00\x02\x01" + "\x00\x00\x00\x00\x00" + "\x00" + summary + empty + strings.Repeat("\x00"+empty+empty, 2)
	}
	tests := []struct {
		name, data, want string
	}{
		{"no header", "TGT2", "malformed snapshot: no TGT1 header at byte 0"},
		{"capacity 0", "TGT1\x00\x00\x00", "malformed snapshot: capacity 0 at byte 7"},
		{"a long uvarint", "TGT1\x80\x00", "malformed snapshot: uvarint not in its shortest form at byte 4"},
		{"trailing", "TGT1\x00\x00\x01\x00\x00", "malformed snapshot: trailing bytes at byte 8"},
		{"more rules than bytes", "TGT1\x00\x00\x01\x01", "malformed snapshot: rule count 1 is over 0 at byte 8"},
		{"delta over N/K", withSummary("\x03\x02\x00"),
			"malformed snapshot: rule 0: window 5m, requests: delta 2 is over 1 at byte 16"},
		{"entries unsorted", withSummary("\x04\x00\x02" + "\x03\x01b\x00\x01\x01" + "\x03\x01a\x00\x01\x01"),
			"malformed snapshot: rule 0: window 5m, requests: entry 1: not sorted after the one before at byte 27"},
		{"a key that does not decode", withSummary("\x04\x00\x01" + "\x02\x05a\x01\x01"),
			"malformed snapshot: rule 0: window 5m, requests: entry 0: malformed descriptor entries at byte 20"},
		{"counters over the total", withSummary("\x01\x00\x01" + "\x03\x01a\x00\x02\x00"),
			"malformed snapshot: rule 0: window 5m, requests: entry 0: counter 2 is over 1 (the total less capacity × delta, less the counters before) at byte 22"},
		{"a lower bound over the upper", withSummary("\x04\x00\x01" + "\x03\x01a\x00\x01\x02"),
			"malformed snapshot: rule 0: window 5m, requests: entry 0: lower bound 2 is over 1 (its upper bound) at byte 23"},
		{"valid", withSummary("\x04\x00\x01" + "\x03\x01a\x00\x01\x01"), ""},
	}
	for _, tt := range tests {
		var s Snapshot
		err := s.UnmarshalBinary([]byte(tt.data))
		if (tt.want == "" && err != nil) || (tt.want != "" && (err == nil || err.Error() != tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}
