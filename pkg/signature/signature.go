// Package signature signs what the instances of a fleet share through
// Redis, override records (package override/redis) and fleet events
// (package fleet), with HMAC-SHA256 under a key they share
// (--fleet-hmac-key-file), so that write access to Redis alone cannot
// forge an override or an event.
//
// # Wire format
//
// A signed value is the JSON object its package writes, the body, with
// one member added last, "sig", the signature in lowercase hex:
//
//	body:   {"overrides":true,"origin":"0123456789abcdef"}
//	signed: {"overrides":true,"origin":"0123456789abcdef","sig":"<64 hex digits>"}
//
// The signature is HMAC-SHA256(key, purpose || 0x00 || body), where the
// purpose (Override, Event) names what the value is, so that a value
// signed as one never passes as the other. Sign turns the body's closing
// brace into `,"sig":"…"}` (the empty object becomes `{"sig":"…"}`);
// Verify undoes exactly that: it takes the signature from the last 73
// bytes and checks it against the bytes before them with their closing
// brace put back. The bytes checked are therefore the bytes decoded, with
// no re-encoding in between, and anything else (the member elsewhere,
// spaces, upper-case digits) does not verify.
//
// A reader without a key decodes the signed bytes as they are:
// encoding/json ignores the unknown "sig" member, so an instance without
// a key, and a version from before signatures, reads what a keyed
// instance writes. (So no type signed may have a field that JSON would
// match to "sig", in any case.)
//
// # Guarantees
//
// A value that verifies was written, byte for byte, by a holder of the key,
// as a value of that purpose. It does not say when: whoever can write to
// Redis can still replay a value a keyed instance wrote before (put back
// an override deleted before its expiry, repeat a reset), delete values,
// and change counters, which are not signed. The key keeps its bytes to
// itself: it formats and logs as "[redacted]".
package signature

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// MinKeyLen is the length, in bytes, of the shortest key NewKey takes:
// as long as the HMAC-SHA256 output.
const MinKeyLen = 32

// Purpose names what a signed value is; it is signed with the value.
type Purpose string

// The purposes of the values tollgate signs.
const (
	// Override is an override record in Redis.
	Override Purpose = "tollgate override record v1"
	// Event is a message on the fleet channel.
	Event Purpose = "tollgate fleet event v1"
)

// The reasons Verify refuses a value.
var (
	// ErrMissing: the value carries no signature where Sign puts one,
	// as an instance without the key writes it.
	ErrMissing = errors.New("no signature")
	// ErrMismatch: the signature is not the value's under the key, as a
	// value signed under another key, or altered, is.
	ErrMismatch = errors.New("signature does not match")
)

// sigMember starts the member Sign adds, sigEnd ends it and the object.
const (
	sigMember = `"sig":"`
	sigEnd    = `"}`
)

// tailLen is the length of the member Sign adds and the closing brace.
const tailLen = len(sigMember) + 2*sha256.Size + len(sigEnd)

// Key signs and verifies values. It formats and logs as "[redacted]".
type Key struct {
	key []byte
}

// NewKey returns a Key of a copy of key, which must be at least MinKeyLen
// bytes long.
func NewKey(key []byte) (*Key, error) {
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("the key is %d bytes long; at least %d are needed", len(key), MinKeyLen)
	}
	return &Key{key: bytes.Clone(key)}, nil
}

// String returns "[redacted]".
func (k *Key) String() string { return "[redacted]" }

// GoString keeps %#v from printing the key.
func (k *Key) GoString() string { return k.String() }

// LogValue keeps slog from printing the key.
func (k *Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

// Sign returns body, a JSON object as encoding/json writes it, signed
// for purpose p. It fails on a body that is not an object.
func (k *Key) Sign(p Purpose, body []byte) ([]byte, error) {
	if len(body) < 2 || body[0] != '{' || body[len(body)-1] != '}' {
		return nil, errors.New("signing: the value is not a JSON object")
	}
	out := make([]byte, 0, len(body)+1+tailLen)
	out = append(out, body[:len(body)-1]...)
	if len(body) > 2 {
		out = append(out, ',')
	}
	out = append(out, sigMember...)
	out = hex.AppendEncode(out, k.mac(p, body))
	return append(out, sigEnd...), nil
}

// Verify returns the body of data, a value Sign signed for purpose p
// under this key. A value without a signature is refused with an error
// wrapping ErrMissing, one whose signature does not match with
// ErrMismatch.
func (k *Key) Verify(p Purpose, data []byte) ([]byte, error) {
	body, sig, ok := split(data)
	if !ok {
		return nil, ErrMissing
	}
	want := hex.AppendEncode(nil, k.mac(p, body))
	if !hmac.Equal(sig, want) {
		return nil, ErrMismatch
	}
	return body, nil
}

// mac returns the HMAC of body for purpose p.
func (k *Key) mac(p Purpose, body []byte) []byte {
	h := hmac.New(sha256.New, k.key)
	h.Write([]byte(p))
	h.Write([]byte{0})
	h.Write(body)
	return h.Sum(nil)
}

// split returns the body of a value that ends as Sign ends it, and the
// hex digits of its signature.
func split(data []byte) (body, sig []byte, ok bool) {
	n := len(data) - tailLen // where the member starts
	if n < 1 {
		return nil, nil, false
	}
	tail := data[n:]
	if !bytes.HasPrefix(tail, []byte(sigMember)) || !bytes.HasSuffix(tail, []byte(sigEnd)) {
		return nil, nil, false
	}
	sig = tail[len(sigMember) : len(tail)-len(sigEnd)]
	switch {
	case n == 1 && data[0] == '{':
		return []byte("{}"), sig, true
	case n > 2 && data[n-1] == ',': // not `{,`, which Sign never writes
		return append(bytes.Clone(data[:n-1]), '}'), sig, true
	}
	return nil, nil, false
}

// meterName is the instrumentation scope of the refusals counter.
const meterName = "github.com/tollgatehq/tollgate/pkg/signature"

// Refusals counts the values refused for their signature, in
// tollgate_fleet_unsigned_refused_total, by kind (what was refused: an
// override record, a fleet event) and reason ("missing" or "mismatch").
type Refusals struct {
	counter           metric.Int64Counter
	missing, mismatch metric.AddOption
}

// NewRefusals returns the Refusals of one kind of value, counted on mp (nil
// means a no-op provider). The packages that verify share one counter
// through it.
func NewRefusals(mp metric.MeterProvider, kind string) (*Refusals, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	counter, err := mp.Meter(meterName).Int64Counter("tollgate_fleet_unsigned_refused",
		metric.WithDescription("Override records and fleet events refused, with --fleet-hmac-key-file, for carrying no signature (missing) or one that is not theirs under the key (mismatch), by kind and reason."),
		metric.WithUnit("{value}"))
	if err != nil {
		return nil, fmt.Errorf("creating the refusals counter: %w", err)
	}
	return &Refusals{
		counter:  counter,
		missing:  metric.WithAttributes(attribute.String("kind", kind), attribute.String("reason", "missing")),
		mismatch: metric.WithAttributes(attribute.String("kind", kind), attribute.String("reason", "mismatch")),
	}, nil
}

// Add counts one value that Verify refused with err.
func (r *Refusals) Add(ctx context.Context, err error) {
	if errors.Is(err, ErrMissing) {
		r.counter.Add(ctx, 1, r.missing)
		return
	}
	r.counter.Add(ctx, 1, r.mismatch)
}
