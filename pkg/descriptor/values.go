package descriptor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// ValueView is how the surfaces an operator reads show a request's
// descriptor values, which are often API keys: the logs, the audit, the
// admin API's answers, /debug/config. It never changes what is decided,
// stored or answered to Envoy; keys always show as they are.
//
// ValuesPlain, the zero ValueView, shows values as they are. ValuesHash
// shows each as "sha256:" and the first 12 hex digits of the SHA-256 of
// its bytes: api_key=sk-live-1 shows as api_key=sha256:f8dc9db173ee.
// The empty value stays empty.
//
// The hash is not keyed, on purpose: the same value shows the same on
// every instance and across restarts, and an operator holding a key can
// find it in a log with `printf %s KEY | sha256sum | cut -c1-12`. So it
// hides values that cannot be guessed, such as API keys and tokens, but
// not values that can be enumerated, such as IP addresses, user ids or
// tenant names: whoever reads the hash can hash every candidate. Twelve
// hex digits are 48 bits: two of a few million distinct values may show
// alike, which does no harm to a log reader who has the full value to
// hash, and changes nothing in what tollgate decides.
type ValueView uint8

// The value views.
const (
	ValuesPlain ValueView = iota
	ValuesHash
)

// HashPrefix begins every value that ValuesHash shows.
const HashPrefix = "sha256:"

// hashDigits is how many hex digits of the SHA-256 ValuesHash shows.
const hashDigits = 12

var valueViewNames = [...]string{ValuesPlain: "plain", ValuesHash: "hash"}

// ParseValueView returns the value view named s, ignoring case.
func ParseValueView(s string) (ValueView, error) {
	for v, name := range valueViewNames {
		if strings.EqualFold(s, name) {
			return ValueView(v), nil
		}
	}
	return 0, fmt.Errorf("unknown value view %q (want plain or hash)", s)
}

// String returns the lower-case name of v, such as "hash".
func (v ValueView) String() string {
	if int(v) >= len(valueViewNames) {
		return fmt.Sprintf("value_view(%d)", v)
	}
	return valueViewNames[v]
}

// Show returns value as v shows it.
func (v ValueView) Show(value string) string {
	if v != ValuesHash || value == "" {
		return value
	}
	sum := sha256.Sum256([]byte(value))
	return HashPrefix + hex.EncodeToString(sum[:hashDigits/2])
}

// ShowEntries returns entries with their values as v shows them. It
// returns entries itself for ValuesPlain and a new slice otherwise: it
// never changes entries.
func (v ValueView) ShowEntries(entries []Entry) []Entry {
	if v != ValuesHash || entries == nil {
		return entries
	}
	out := make([]Entry, len(entries))
	for i, e := range entries {
		out[i] = Entry{Key: e.Key, Value: v.Show(e.Value)}
	}
	return out
}
