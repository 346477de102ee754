package fleet

import (
	"reflect"
	"testing"
)

// FuzzDecode decodes arbitrary payloads of the fleet channel, as a Bus
// reads what any publisher on the channel sent. It asserts that decode
// never panics; that an event it decodes is never a Resync, which only Run
// makes; and that the event encodes to a message that decodes to the same
// event (an empty reset list reads as none) and encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
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
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := decode(data)
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
	})
}
