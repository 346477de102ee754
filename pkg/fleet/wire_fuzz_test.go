package fleet

import (
	"errors"
	"reflect"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/signature"
)

// fuzzKey signs the signed seeds of FuzzDecode.
var fuzzKey = func() *signature.Key {
	k, err := signature.NewKey([]byte("fleet-fuzz-key-0123456789abcdef!"))
	if err != nil {
		panic(err)
	}
	return k
}()

// FuzzDecode decodes arbitrary payloads of the fleet channel, as a Bus
// reads what any publisher on the channel sent, with a key and without.
// It asserts that decode never panics; that an event it decodes is never
// a Resync, which only Run makes; and that the event encodes to a message
// that decodes to the same event (an empty reset list reads as none) and
// encodes to the same bytes. Signed: a payload that verifies under the key
// decodes, from the bytes the key checked, to what a Bus without a key
// decodes from the whole payload; and an event encoded and signed
// verifies to its message, which a Bus without a key reads as the event.
func FuzzDecode(f *testing.F) {
	seeds := []string{
		`{"overrides":true,"origin":"0123456789abcdef"}`,
		`{"reset":[{"domain":"api","entries":[{"Key":"api_key","Value":"k1"},{"Key":"endpoint","Value":"/search"}],"shard":"k1","kind":1,"period_us":1000000},` +
			`{"domain":"d","entries":[{"Key":"k","Value":"a\"b\\c \u003c\u0026\u003e é {x}"}],"shard":"{x}","kind":2,"period_us":3600000000}],"origin":"o"}`,
		`{"reset":[],"origin":""}`,
		`{"reset":[{"entries":null,"kind":-1,"period_us":-9223372036854775808}]}`,
		`{"reset":[{"domain":"d","entries":[{"key":"lower","value":"case"},{}],"kind":99,"period_us":1.5}]}`,
		`{"Resync":true,"overrides":"yes"}`,
		`{"origin":"\ud800\xff"}`,
		`{"overrides":true} {"overrides":false}`,
		`null`,
		`[]`,
		``,
	}
	for _, seed := range seeds {
		f.Add([]byte(seed))
	}
	// The valid seeds signed, and signed members that are not last.
	for _, seed := range seeds[:5] {
		signed, err := fuzzKey.Sign(signature.Event, []byte(seed))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(signed)
	}
	f.Add([]byte(`{"sig":"0000000000000000000000000000000000000000000000000000000000000000","overrides":true,"origin":"o"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := decode(data)
		if body, verr := fuzzKey.Verify(signature.Event, data); verr == nil {
			keyed, kerr := decode(body)
			if (kerr == nil) != (err == nil) || !reflect.DeepEqual(keyed, e) {
				t.Fatalf("%q: with the key %+v, %v; without %+v, %v", data, keyed, kerr, e, err)
			}
		} else if !errors.Is(verr, signature.ErrMissing) && !errors.Is(verr, signature.ErrMismatch) {
			t.Fatalf("Verify(%q): %v", data, verr)
		}
		if err != nil {
			return
		}
		if e.Resync {
			t.Fatalf("decoded a resync from %q", data)
		}
		wire, err := encode(e)
		if err != nil {
			t.Fatalf("encoding %+v, decoded from %q: %v", e, data, err)
		}
		again, err := decode(wire)
		if err != nil {
			t.Fatalf("decoding %s, encoded from %q: %v", wire, data, err)
		}
		if len(e.Reset) == 0 {
			e.Reset = nil
		}
		if !reflect.DeepEqual(again, e) {
			t.Fatalf("%q decodes to\n%+v\nwhich encodes to %s, which decodes to\n%+v", data, e, wire, again)
		}
		if wire2, err := encode(again); err != nil || string(wire2) != string(wire) {
			t.Fatalf("encoded again: %s, %v; want %s", wire2, err, wire)
		}
		signed, err := fuzzKey.Sign(signature.Event, wire)
		if err != nil {
			t.Fatalf("signing %s: %v", wire, err)
		}
		if body, err := fuzzKey.Verify(signature.Event, signed); err != nil || string(body) != string(wire) {
			t.Fatalf("%s signs to %s, which verifies to %s, %v", wire, signed, body, err)
		}
		if unkeyed, err := decode(signed); err != nil || !reflect.DeepEqual(unkeyed, again) {
			t.Fatalf("without the key %s decodes to %+v, %v; want %+v", signed, unkeyed, err, again)
		}
	})
}
