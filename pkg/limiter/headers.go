package limiter

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// HeaderStyle chooses which rate-limit headers an answer carries.
type HeaderStyle uint8

// The header styles. Whatever the style, an OVER_LIMIT answer carries
// Retry-After (unless a descriptor's cost exceeds its limit's whole
// capacity, so that no wait would help), and allow-list, deny-list,
// degraded and penalized answers carry an X-RateLimit-Policy marker.
const (
	// HeadersNone adds no rate-limit headers.
	HeadersNone HeaderStyle = iota
	// HeadersDraft03 adds the IETF draft-03 trio: RateLimit-Limit with one
	// policy per limited descriptor ("10, 10;w=60"), RateLimit-Remaining
	// and RateLimit-Reset in delta seconds.
	HeadersDraft03
	// HeadersXRateLimit adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset as a Unix epoch second.
	HeadersXRateLimit
	// HeadersIETF adds the fields of the newest IETF draft (-10):
	// RateLimit-Policy (`"name";q=10;w=60`, one per limited descriptor) and
	// RateLimit (`"name";r=5;t=30`).
	HeadersIETF
)

var styleNames = [...]string{
	HeadersNone:       "none",
	HeadersDraft03:    "draft03",
	HeadersXRateLimit: "xratelimit",
	HeadersIETF:       "ietf",
}

// String returns the configuration name of s, such as "xratelimit".
func (s HeaderStyle) String() string {
	if int(s) >= len(styleNames) {
		return fmt.Sprintf("headerstyle(%d)", uint8(s))
	}
	return styleNames[s]
}

// ParseHeaderStyle returns the style named s, ignoring case: "none",
// "draft03", "xratelimit" or "ietf".
func ParseHeaderStyle(s string) (HeaderStyle, error) {
	for i, name := range styleNames {
		if strings.EqualFold(s, name) {
			return HeaderStyle(i), nil
		}
	}
	return 0, fmt.Errorf("unknown header style %q (want none, draft03, xratelimit or ietf)", s)
}

// The header names tollgate sends.
const (
	HeaderPolicy         = "X-RateLimit-Policy"
	HeaderXLimit         = "X-RateLimit-Limit"
	HeaderXRemaining     = "X-RateLimit-Remaining"
	HeaderXReset         = "X-RateLimit-Reset"
	HeaderDraftLimit     = "RateLimit-Limit"
	HeaderDraftRemaining = "RateLimit-Remaining"
	HeaderDraftReset     = "RateLimit-Reset"
	HeaderIETFPolicy     = "RateLimit-Policy"
	HeaderIETF           = "RateLimit"
	HeaderRetryAfter     = "Retry-After"
	HeaderContentType    = "content-type"
)

// The X-RateLimit-Policy markers.
const (
	PolicyAllowlist = "allowlist"
	PolicyDenylist  = "denylist"
	PolicyDegraded  = "degraded"
	// PolicyPenalty marks an answer that a penalty's cooldown rejected:
	// the client kept sending while told to wait.
	PolicyPenalty = "penalty"
)

// flags records which markers an answer needs.
type flags uint8

const (
	flagAllow flags = 1 << iota
	flagDeny
	flagDegraded
	flagPenalty
)

// headerBuilder collects header values in one buffer so that all values of
// an answer share a single string allocation.
type headerBuilder struct {
	buf   []byte
	spans [len(answer{}.headers)]struct {
		key        string
		start, end int
	}
	n int
}

// begin starts the value of a header named key.
func (b *headerBuilder) begin(key string) {
	b.spans[b.n].key = key
	b.spans[b.n].start = len(b.buf)
}

// end finishes the value begun last.
func (b *headerBuilder) end() {
	b.spans[b.n].end = len(b.buf)
	b.n++
}

// constant adds a header whose value is a constant string; it costs no
// allocation.
func (b *headerBuilder) constant(resp *Response, key, value string) {
	resp.Headers = append(resp.Headers, Header{Key: key, Value: value})
}

// addHeaders adds the headers and, when over the limit, the body of resp.
func (l *Limiter) addHeaders(s *scratch, resp *Response, now time.Time, f flags) {
	ci := restrictive(resp.Statuses)
	b := headerBuilder{buf: s.buf[:0]}
	if ci >= 0 && l.style != HeadersNone {
		c := &resp.Statuses[ci]
		switch l.style {
		case HeadersXRateLimit:
			b.begin(HeaderXLimit)
			b.buf = strconv.AppendUint(b.buf, capacity(c.Limit), 10)
			b.end()
			b.begin(HeaderXRemaining)
			b.buf = strconv.AppendUint(b.buf, uint64(c.Remaining), 10)
			b.end()
			b.begin(HeaderXReset)
			b.buf = strconv.AppendInt(b.buf, ceilUnix(now.Add(c.ResetAfter)), 10)
			b.end()
		case HeadersDraft03:
			b.begin(HeaderDraftLimit)
			b.buf = strconv.AppendUint(b.buf, capacity(c.Limit), 10)
			for i := range resp.Statuses {
				if lim := resp.Statuses[i].Limit; lim != nil {
					b.buf = append(b.buf, ", "...)
					b.buf = appendPolicy(b.buf, lim, ";w=")
				}
			}
			b.end()
			b.begin(HeaderDraftRemaining)
			b.buf = strconv.AppendUint(b.buf, uint64(c.Remaining), 10)
			b.end()
			b.begin(HeaderDraftReset)
			b.buf = strconv.AppendInt(b.buf, ceilSeconds(c.ResetAfter), 10)
			b.end()
		case HeadersIETF:
			b.begin(HeaderIETFPolicy)
			sep := false
			for i := range resp.Statuses {
				if lim := resp.Statuses[i].Limit; lim != nil {
					if sep {
						b.buf = append(b.buf, ", "...)
					}
					sep = true
					b.buf = appendSFString(b.buf, policyName(lim, s.descs[i].rule))
					b.buf = append(b.buf, ";q="...)
					b.buf = appendPolicy(b.buf, lim, ";w=")
				}
			}
			b.end()
			b.begin(HeaderIETF)
			b.buf = appendSFString(b.buf, policyName(c.Limit, s.descs[ci].rule))
			b.buf = append(b.buf, ";r="...)
			b.buf = strconv.AppendUint(b.buf, uint64(c.Remaining), 10)
			b.buf = append(b.buf, ";t="...)
			b.buf = strconv.AppendInt(b.buf, ceilSeconds(c.ResetAfter), 10)
			b.end()
		}
	}
	retry, never := int64(0), -1
	if resp.Code == OverLimit {
		var wait time.Duration
		for i := range resp.Statuses {
			if st := &resp.Statuses[i]; st.Code == OverLimit {
				wait = max(wait, st.RetryAfter)
				if st.Never && never < 0 {
					never = i
				}
			}
		}
		// A request that can never pass is not told to come back.
		if never < 0 {
			retry = max(ceilSeconds(wait), 1)
			b.begin(HeaderRetryAfter)
			b.buf = strconv.AppendInt(b.buf, retry, 10)
			b.end()
		}
	}
	if b.n > 0 {
		values := string(b.buf)
		for _, sp := range b.spans[:b.n] {
			resp.Headers = append(resp.Headers, Header{Key: sp.key, Value: values[sp.start:sp.end]})
		}
	}
	s.buf = b.buf
	if f&flagAllow != 0 {
		b.constant(resp, HeaderPolicy, PolicyAllowlist)
	}
	if f&flagDeny != 0 {
		b.constant(resp, HeaderPolicy, PolicyDenylist)
	}
	if f&flagDegraded != 0 {
		b.constant(resp, HeaderPolicy, PolicyDegraded)
	}
	if f&flagPenalty != 0 {
		b.constant(resp, HeaderPolicy, PolicyPenalty)
	}
	if resp.Code == OverLimit {
		b.constant(resp, HeaderContentType, "application/json")
		if never >= 0 {
			resp.Body = appendNeverBody(make([]byte, 0, 160), &resp.Statuses[never])
			return
		}
		var over *Status
		if ci >= 0 && resp.Statuses[ci].Code == OverLimit {
			over = &resp.Statuses[ci]
		}
		resp.Body = appendBody(make([]byte, 0, 160), over, retry, now)
	}
}

// restrictive returns the index of the most restrictive status that has a
// limit, or -1: an over-limit one (the longest wait first), else the one
// with the least remaining.
func restrictive(statuses []Status) int {
	ci := -1
	for i := range statuses {
		st := &statuses[i]
		if st.Limit == nil {
			continue
		}
		if ci < 0 {
			ci = i
			continue
		}
		c := &statuses[ci]
		over, cOver := st.Code == OverLimit, c.Code == OverLimit
		switch {
		case over && !cOver:
			ci = i
		case over && cOver && st.RetryAfter > c.RetryAfter:
			ci = i
		case !over && !cOver && st.Remaining < c.Remaining:
			ci = i
		}
	}
	return ci
}

// appendBody appends the JSON body of a 429. over is the over-limit status
// that decided it, or nil when only a deny list did.
func appendBody(b []byte, over *Status, retry int64, now time.Time) []byte {
	b = append(b, `{"code":429,"message":`...)
	switch {
	case over == nil:
		b = append(b, `"request denied by policy"`...)
	case over.Penalized:
		b = append(b, `"rate limit exceeded: requests sent while told to wait are blocked for a cooldown","penalty":true,"limit":`...)
		b = appendPolicy(b, over.Limit, `,"window":`)
	default:
		b = append(b, `"rate limit exceeded","limit":`...)
		b = appendPolicy(b, over.Limit, `,"window":`)
	}
	b = append(b, `,"retry_after_seconds":`...)
	b = strconv.AppendInt(b, retry, 10)
	if over != nil {
		b = append(b, `,"reset_at":"`...)
		b = time.Unix(ceilUnix(now.Add(over.ResetAfter)), 0).UTC().AppendFormat(b, time.RFC3339)
		b = append(b, '"')
	}
	return append(b, '}')
}

// appendNeverBody appends the JSON body of a 429 that no wait would
// change: over's cost exceeds its limit's whole capacity. It promises no
// retry.
func appendNeverBody(b []byte, over *Status) []byte {
	b = append(b, `{"code":429,"message":"request cost exceeds the limit's capacity: it can never be admitted","limit":`...)
	return append(appendPolicy(b, over.Limit, `,"window":`), '}')
}

// appendPolicy appends "q<sep>w" for lim: its capacity and its window in
// seconds.
func appendPolicy(b []byte, lim *descriptor.Limit, sep string) []byte {
	b = strconv.AppendUint(b, capacity(lim), 10)
	b = append(b, sep...)
	return strconv.AppendInt(b, int64(lim.Period()/time.Second), 10)
}

// policyName names a limit in the IETF fields: its own name, else the path
// of its rule, else "override" for an Envoy override that matched no rule.
func policyName(lim *descriptor.Limit, rule *descriptor.Rule) string {
	switch {
	case lim.Name != "":
		return lim.Name
	case rule != nil:
		return rule.Path
	}
	return "override"
}

// appendSFString appends s as a structured-field string (RFC 8941): quoted,
// with '"' and '\' escaped and characters outside printable ASCII replaced
// by '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// capacity returns the hits lim admits at once: its requests per unit, plus
// its burst for a token bucket, as algorithm.Verdict.Limit reports it.
func capacity(lim *descriptor.Limit) uint64 {
	return uint64(lim.RequestsPerUnit) + uint64(lim.Burst)
}

// ceilSeconds returns d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// ceilUnix returns t as Unix seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	sec := t.Unix()
	if t.Nanosecond() > 0 {
		sec++
	}
	return sec
}
