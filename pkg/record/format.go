package record

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/override"
)

// Version is the format version this package writes and reads.
const Version = 1

// MaxLineBytes bounds one line that a Reader accepts.
const MaxLineBytes = 4 << 20

// The types of lines.
const (
	TypeHeader   = "header"
	TypeCall     = "call"
	TypeOverride = "override"
)

// The changes an override line records.
const (
	ChangeCreated = "created"
	ChangeDeleted = "deleted"
)

// ErrFormat is wrapped by every error a Reader returns for a malformed
// recording; the errors name the line.
var ErrFormat = errors.New("malformed recording")

// Header opens every file of a recording.
type Header struct {
	Version   int       `json:"version"`
	RulesHash string    `json:"rules_hash"`
	Start     time.Time `json:"start"`
	// Sample is the share of clients recorded (1: all), and Key the entry
	// key naming the client ("": the domain's shard_by, else the first
	// entry).
	Sample    float64             `json:"sample"`
	Key       string              `json:"key"`
	Overrides []override.Override `json:"overrides"`
}

// Call is one decided request.
type Call struct {
	// Time is the decision's instant, in microseconds since the Unix
	// epoch.
	Time   int64  `json:"t"`
	Domain string `json:"domain"`
	// Hits is the request's hits_addend as sent; 0 means 1.
	Hits uint32 `json:"hits"`
	// Code is the request's answer, "OK" or "OVER_LIMIT": the overall
	// code Envoy acted on.
	Code        string       `json:"code"`
	Descriptors []Descriptor `json:"descriptors"`
}

// Descriptor is one descriptor of a Call and its verdict.
type Descriptor struct {
	// Entries are as sent, a charge marker included.
	Entries []descriptor.Entry `json:"entries"`
	// Hits is the descriptor's own hits_addend, nil when it set none.
	Hits     *uint64   `json:"hits,omitempty"`
	Refund   bool      `json:"refund,omitempty"`
	Override *Override `json:"override,omitempty"`
	// Code is "OK" or "OVER_LIMIT".
	Code string `json:"code"`
	// Rule and Limit name the rule's path and the reported limit's
	// name; empty when no rule decided.
	Rule  string `json:"rule,omitempty"`
	Limit string `json:"limit,omitempty"`
}

// Override is Envoy's per-descriptor limit override.
type Override struct {
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit"`
	UnitMultiplier  uint32 `json:"unit_multiplier,omitempty"`
}

// OverrideChange is an override created or deleted while recording.
type OverrideChange struct {
	Time     int64             `json:"t"`
	Change   string            `json:"change"`
	Override override.Override `json:"override"`
}

// Line is one decoded line: its type and exactly one of the pointers.
type Line struct {
	Type     string
	Header   *Header
	Call     *Call
	Override *OverrideChange
	// Number is the line's number in its file, from 1.
	Number int
}

// Reader decodes a recording strictly: unknown fields and types, a
// missing or repeated header, an unknown version and trailing data are
// errors that name the line.
type Reader struct {
	sc     *bufio.Scanner
	n      int
	header *Header
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	return &Reader{sc: sc}
}

// Header returns the header once the first line is read, else nil.
func (r *Reader) Header() *Header { return r.header }

// Next returns the next line, io.EOF after the last, or an error wrapping
// ErrFormat (or the underlying reader's error).
func (r *Reader) Next() (Line, error) {
	if !r.sc.Scan() {
		if err := r.sc.Err(); err != nil {
			if errors.Is(err, bufio.ErrTooLong) {
				return Line{}, fmt.Errorf("line %d: longer than %d bytes: %w", r.n+1, MaxLineBytes, ErrFormat)
			}
			return Line{}, fmt.Errorf("reading line %d: %w", r.n+1, err)
		}
		if r.header == nil {
			return Line{}, fmt.Errorf("line %d: no header: %w", r.n+1, ErrFormat)
		}
		return Line{}, io.EOF
	}
	r.n++
	l, err := r.decode(r.sc.Bytes())
	if err != nil {
		return Line{}, fmt.Errorf("line %d: %w: %w", r.n, err, ErrFormat)
	}
	l.Number = r.n
	return l, nil
}

// callPrefix begins every call line this package writes, so that the
// Reader can tell its type without decoding the line twice.
const callPrefix = `{"type":"call",`

// decode decodes one line.
func (r *Reader) decode(b []byte) (Line, error) {
	kind := TypeCall
	if !bytes.HasPrefix(b, []byte(callPrefix)) {
		var k struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(b, &k); err != nil {
			return Line{}, jsonError(err)
		}
		kind = k.Type
	}
	l := Line{Type: kind}
	if r.header == nil && kind != TypeHeader {
		return Line{}, fmt.Errorf("type %q before the header", kind)
	}
	var err error
	switch kind {
	case TypeHeader:
		if r.header != nil {
			return Line{}, errors.New("a second header")
		}
		l.Header = new(Header)
		if err = strict(b, &struct {
			Type string `json:"type"`
			*Header
		}{Header: l.Header}); err == nil {
			err = l.Header.validate()
		}
		if err == nil {
			r.header = l.Header
		}
	case TypeCall:
		l.Call = new(Call)
		if err = strict(b, &struct {
			Type string `json:"type"`
			*Call
		}{Call: l.Call}); err == nil {
			err = l.Call.validate()
		}
	case TypeOverride:
		l.Override = new(OverrideChange)
		if err = strict(b, &struct {
			Type string `json:"type"`
			*OverrideChange
		}{OverrideChange: l.Override}); err == nil {
			err = l.Override.validate()
		}
	default:
		return Line{}, fmt.Errorf("unknown type %q", kind)
	}
	return l, err
}

// strict decodes b, one JSON object, into v, refusing unknown and
// repeated fields, invalid UTF-8 and data after the object. v embeds the
// line's value beside its "type".
func strict(b []byte, v any) error {
	return jsonError(json.Unmarshal(b, v, json.RejectUnknownMembers(true)))
}

// jsonError rewords an error of the JSON decoder to name the place by
// its JSON pointer, without the Go types of this package.
func jsonError(err error) error {
	var sem *json.SemanticError
	var syn *jsontext.SyntacticError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &sem) && errors.Is(sem.Err, json.ErrUnknownName):
		return fmt.Errorf("unknown field %q", string(sem.JSONPointer))
	case errors.As(err, &sem) && sem.Err != nil:
		return fmt.Errorf("field %q: %w", string(sem.JSONPointer), sem.Err)
	case errors.As(err, &sem) && sem.GoType != nil:
		return fmt.Errorf("field %q: a JSON %s where %s belongs", string(sem.JSONPointer), sem.JSONKind, sem.GoType)
	case errors.As(err, &syn) && syn.JSONPointer != "":
		return fmt.Errorf("field %q: %w", string(syn.JSONPointer), syn.Err)
	case errors.As(err, &syn):
		return fmt.Errorf("not a JSON object: %w (at byte %d)", syn.Err, syn.ByteOffset)
	}
	return err
}

func (h *Header) validate() error {
	if h.Version != Version {
		return fmt.Errorf("version %d, this tollgate reads %d", h.Version, Version)
	}
	if h.Sample <= 0 || h.Sample > 1 {
		return fmt.Errorf("sample %v not in (0, 1]", h.Sample)
	}
	return nil
}

func (c *Call) validate() error {
	if c.Domain == "" {
		return errors.New("call without a domain")
	}
	if c.Code != "OK" && c.Code != "OVER_LIMIT" {
		return fmt.Errorf("code %q (want OK or OVER_LIMIT)", c.Code)
	}
	if len(c.Descriptors) == 0 {
		return errors.New("call without descriptors")
	}
	for i, d := range c.Descriptors {
		if len(d.Entries) == 0 {
			return fmt.Errorf("descriptor %d without entries", i)
		}
		if d.Code != "OK" && d.Code != "OVER_LIMIT" {
			return fmt.Errorf("descriptor %d: code %q (want OK or OVER_LIMIT)", i, d.Code)
		}
		if d.Override != nil {
			if _, err := descriptor.ParseUnit(d.Override.Unit); err != nil {
				return fmt.Errorf("descriptor %d: override: %w", i, err)
			}
		}
	}
	return nil
}

func (o *OverrideChange) validate() error {
	if o.Change != ChangeCreated && o.Change != ChangeDeleted {
		return fmt.Errorf("change %q (want %s or %s)", o.Change, ChangeCreated, ChangeDeleted)
	}
	if o.Override.ID == "" {
		return errors.New("override without an id")
	}
	return nil
}
