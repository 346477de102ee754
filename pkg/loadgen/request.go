package loadgen

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// keyPlaceholder is replaced in descriptor templates by the key number.
const keyPlaceholder = "{key}"

// maxKeyDigits is the number of decimal digits of the largest key.
const maxKeyDigits = 20

// Field numbers of envoy.service.ratelimit.v3.RateLimitRequest,
// envoy.extensions.common.ratelimit.v3.RateLimitDescriptor and its Entry.
const (
	requestDomain      protowire.Number = 1
	requestDescriptors protowire.Number = 2
	requestHitsAddend  protowire.Number = 3
	descriptorEntries  protowire.Number = 1
	entryKey           protowire.Number = 1
	entryValue         protowire.Number = 2
	responseOverall    protowire.Number = 1
	responseHeaders    protowire.Number = 3
	headerKey          protowire.Number = 1
	headerValue        protowire.Number = 2
	headerRawValue     protowire.Number = 3
)

// The response header by which tollgate marks an answer made by a failure
// mode instead of its store (limiter.HeaderPolicy and
// limiter.PolicyDegraded).
const (
	policyHeader   = "X-RateLimit-Policy"
	policyDegraded = "degraded"
)

// templateString is a string split around its key placeholders.
type templateString []string

// size returns the length of the string for a key of the given digits.
func (s templateString) size(digits int) int {
	n := (len(s) - 1) * digits
	for _, part := range s {
		n += len(part)
	}
	return n
}

// entryTemplate is one key=value entry of a descriptor template.
type entryTemplate struct {
	key, value templateString
}

// parseTemplate reads a descriptor template "k=v,k2=v2" with the same rules
// as the query command.
func parseTemplate(s string) ([]entryTemplate, error) {
	entries, err := rlsclient.ParseDescriptor(s)
	if err != nil {
		return nil, err
	}
	tmpl := make([]entryTemplate, len(entries))
	for i, e := range entries {
		tmpl[i] = entryTemplate{
			key:   strings.Split(e.Key, keyPlaceholder),
			value: strings.Split(e.Value, keyPlaceholder),
		}
	}
	return tmpl, nil
}

// encodedTemplate is a request encoded for keys of one digit count, with the
// offsets at which the key's digits go.
type encodedTemplate struct {
	wire    []byte
	offsets []int
}

// requestEncoder encodes RateLimitRequests for key numbers. All keys with
// the same number of digits share one wire layout, so encoding a request is
// one allocation, a copy and the digits written at fixed offsets.
type requestEncoder struct {
	byDigits [maxKeyDigits + 1]encodedTemplate
}

// newRequestEncoder compiles the request for the key numbers 0 to keys-1.
func newRequestEncoder(domain string, templates []string, hits uint32, keys int) (*requestEncoder, error) {
	descs := make([][]entryTemplate, len(templates))
	for i, t := range templates {
		d, err := parseTemplate(t)
		if err != nil {
			return nil, fmt.Errorf("descriptor template %q: %w", t, err)
		}
		descs[i] = d
	}
	if keys < 1 {
		return nil, errors.New("keys must be at least 1")
	}
	e := &requestEncoder{}
	maxDigits := len(strconv.Itoa(keys - 1))
	for d := 1; d <= maxDigits; d++ {
		e.byDigits[d] = encodeTemplate(domain, descs, hits, d)
	}
	return e, nil
}

// encode returns the wire form of the request for key. digits is scratch
// space for the key's decimal form.
func (e *requestEncoder) encode(key uint64, digits []byte) []byte {
	digits = strconv.AppendUint(digits[:0], key, 10)
	t := &e.byDigits[len(digits)]
	wire := make([]byte, len(t.wire))
	copy(wire, t.wire)
	for _, off := range t.offsets {
		copy(wire[off:], digits)
	}
	return wire
}

// encodeTemplate encodes the request with zeros in place of a key of the
// given number of digits, in field order as proto.Marshal does, leaving out
// empty values as proto3 does.
func encodeTemplate(domain string, descs [][]entryTemplate, hits uint32, digits int) encodedTemplate {
	var t encodedTemplate
	appendString := func(b []byte, s templateString) []byte {
		for i, part := range s {
			if i > 0 {
				t.offsets = append(t.offsets, len(b))
				b = append(b, strings.Repeat("0", digits)...)
			}
			b = append(b, part...)
		}
		return b
	}
	entrySize := func(e entryTemplate) int {
		n := protowire.SizeTag(entryKey) + protowire.SizeBytes(e.key.size(digits))
		if v := e.value.size(digits); v > 0 {
			n += protowire.SizeTag(entryValue) + protowire.SizeBytes(v)
		}
		return n
	}

	var b []byte
	b = protowire.AppendTag(b, requestDomain, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	for _, d := range descs {
		size := 0
		for _, e := range d {
			size += protowire.SizeTag(descriptorEntries) + protowire.SizeBytes(entrySize(e))
		}
		b = protowire.AppendTag(b, requestDescriptors, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		for _, e := range d {
			b = protowire.AppendTag(b, descriptorEntries, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(entrySize(e)))
			b = protowire.AppendTag(b, entryKey, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(e.key.size(digits)))
			b = appendString(b, e.key)
			if v := e.value.size(digits); v > 0 {
				b = protowire.AppendTag(b, entryValue, protowire.BytesType)
				b = protowire.AppendVarint(b, uint64(v))
				b = appendString(b, e.value)
			}
		}
	}
	if hits != 0 {
		b = protowire.AppendTag(b, requestHitsAddend, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(hits))
	}
	t.wire = b
	return t
}

// answer is what the generator reads of a RateLimitResponse.
type answer struct {
	// overall is the overall_code.
	overall uint64
	// degraded reports a response header X-RateLimit-Policy: degraded.
	degraded bool
}

// exchange is one call's request in wire form and its answer. A worker
// reuses its exchange for every call, so passing it to gRPC as the request
// and the reply allocates nothing.
type exchange struct {
	request []byte
	answer  answer
}

// wireCodec sends pre-encoded requests and decodes only the overall_code and
// the degraded marker of answers. It is named "proto" so that the content
// type is the usual one.
type wireCodec struct{}

var _ encoding.CodecV2 = wireCodec{}

// Name returns the content subtype, "proto".
func (wireCodec) Name() string { return "proto" }

// Marshal returns the request of an *exchange as it is.
func (wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	x, ok := v.(*exchange)
	if !ok {
		return nil, fmt.Errorf("loadgen codec cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(x.request)}, nil
}

// Unmarshal stores the answer read from a RateLimitResponse in an *exchange.
func (wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	x, ok := v.(*exchange)
	if !ok {
		return fmt.Errorf("loadgen codec cannot unmarshal into %T", v)
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		b = data.Materialize()
	}
	a, err := decodeAnswer(b)
	if err != nil {
		return fmt.Errorf("decoding RateLimitResponse: %w", err)
	}
	x.answer = a
	return nil
}

// decodeAnswer reads field 1 (overall_code; 0, UNKNOWN, if absent) and the
// response_headers_to_add (field 3) of an encoded RateLimitResponse,
// skipping every other field.
func decodeAnswer(b []byte) (answer, error) {
	var a answer
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return answer{}, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == responseOverall && typ == protowire.VarintType:
			a.overall, n = protowire.ConsumeVarint(b)
		case num == responseHeaders && typ == protowire.BytesType:
			var h []byte
			h, n = protowire.ConsumeBytes(b)
			if n >= 0 {
				degraded, err := isDegradedHeader(h)
				if err != nil {
					return answer{}, err
				}
				a.degraded = a.degraded || degraded
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return answer{}, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return a, nil
}

// isDegradedHeader reports whether an encoded envoy.config.core.v3.HeaderValue
// is X-RateLimit-Policy: degraded. The name is compared without regard to
// case, as HTTP does; the value exactly, from raw_value when value is empty
// as Envoy reads it.
func isDegradedHeader(b []byte) (bool, error) {
	var key, value, raw []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false, protowire.ParseError(n)
		}
		b = b[n:]
		var field *[]byte
		if typ == protowire.BytesType {
			switch num {
			case headerKey:
				field = &key
			case headerValue:
				field = &value
			case headerRawValue:
				field = &raw
			}
		}
		if field != nil {
			*field, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return false, protowire.ParseError(n)
		}
		b = b[n:]
	}
	if len(value) == 0 {
		value = raw
	}
	return string(value) == policyDegraded && equalFoldASCII(key, policyHeader), nil
}

// equalFoldASCII reports whether b equals s, ignoring the case of ASCII
// letters, without converting b to a string.
func equalFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}
