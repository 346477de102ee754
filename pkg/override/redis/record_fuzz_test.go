package redis

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/override"
)

// FuzzDecodeRecord decodes arbitrary override records, as Load and Delete
// read whatever a writer to Redis left there. It asserts that decodeRecord
// never panics, and that an override it decodes encodes to a record that
// decodes to the same override (its times the same instants) and encodes
// to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	for _, seed := range []string{
		`{"id":"a1","domain":"api","entries":[{"key":"k","value":"v"}],"multiplier":2.5,"expires_at":"2026-03-02T12:00:00Z",` +
			`"reason":"launch","created_by":"ops","created_at":"2026-03-01T12:00:00+01:00"}`,
		`{"id":"a2","domain":"api","entries":[{"key":"k","value":"\u0000"},{}],"limit":{"requests_per_unit":4294967295,"unit":"minute"},` +
			`"expires_at":"0000-01-01T00:00:00-23:59","created_at":"9999-12-31T23:59:59.999999999Z"}`,
		`{"id":"a3","entries":null,"multiplier":-1e308,"limit":null,"expires_at":"2026-03-02T12:00:00.1234567891Z"}`,
		`{"id":"a4","limit":{"requests_per_unit":-1}}`,
		`{"ID":"case","Domain":"insensitive","unknown":[1,2,3]}`,
		`{"expires_at":"not a time"}`,
		`{"id":"\ud800\xff"}`,
		`{} {}`,
		`null`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := decodeRecord(data)
		if err != nil {
			return
		}
		rec, err := encodeRecord(o)
		if err != nil {
			t.Fatalf("encoding %+v, decoded from %q: %v", o, data, err)
		}
		again, err := decodeRecord(rec)
		if err != nil {
			t.Fatalf("decoding %s, encoded from %q: %v", rec, data, err)
		}
		if !sameOverride(again, o) {
			t.Fatalf("%q decodes to\n%+v\nwhich encodes to %s, which decodes to\n%+v", data, o, rec, again)
		}
		if rec2, err := encodeRecord(again); err != nil || !bytes.Equal(rec2, rec) {
			t.Fatalf("encoded again: %s, %v; want %s", rec2, err, rec)
		}
	})
}

// sameOverride reports whether a and b are the same override, their times
// compared as instants.
func sameOverride(a, b override.Override) bool {
	if !a.ExpiresAt.Equal(b.ExpiresAt) || !a.CreatedAt.Equal(b.CreatedAt) {
		return false
	}
	a.ExpiresAt, a.CreatedAt, b.ExpiresAt, b.CreatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}
