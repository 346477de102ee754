package redis

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/signature"
)

// fuzzKey signs the signed seeds of FuzzDecodeRecord.
var fuzzKey = func() *signature.Key {
	k, err := signature.NewKey([]byte("override-fuzz-key-0123456789abc!"))
	if err != nil {
		panic(err)
	}
	return k
}()

// FuzzDecodeRecord decodes arbitrary override records, as Load and Delete
// read whatever a writer to Redis left there, with a key and without. It
// asserts that decodeRecord never panics, and that an override it decodes
// encodes to a record that decodes to the same override (its times the
// same instants) and encodes to the same bytes. Signed: a record that
// verifies under the key decodes, from the bytes the key checked, to what
// a store without a key decodes from the whole record; and a record
// encoded and signed verifies to its encoding, which a store without a
// key reads as the override.
func FuzzDecodeRecord(f *testing.F) {
	seeds := []string{
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
	}
	for _, seed := range seeds {
		f.Add([]byte(seed))
	}
	for _, seed := range seeds[:6] { // the objects, signed
		signed, err := fuzzKey.Sign(signature.Override, []byte(seed))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(signed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := decodeRecord(data)
		if body, verr := fuzzKey.Verify(signature.Override, data); verr == nil {
			keyed, kerr := decodeRecord(body)
			if (kerr == nil) != (err == nil) || !sameOverride(keyed, o) {
				t.Fatalf("%q: with the key %+v, %v; without %+v, %v", data, keyed, kerr, o, err)
			}
		}
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
		signed, err := fuzzKey.Sign(signature.Override, rec)
		if err != nil {
			t.Fatalf("signing %s: %v", rec, err)
		}
		if body, err := fuzzKey.Verify(signature.Override, signed); err != nil || !bytes.Equal(body, rec) {
			t.Fatalf("%s signs to %s, which verifies to %s, %v", rec, signed, body, err)
		}
		if unkeyed, err := decodeRecord(signed); err != nil || !sameOverride(unkeyed, again) {
			t.Fatalf("without the key %s decodes to %+v, %v; want %+v", signed, unkeyed, err, again)
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
