package record

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tollgatehq/tollgate/pkg/limiter"
)

// appendCall appends the line of a decided request, newline included, to
// b. It writes what Call decodes, without reflection.
func appendCall(b []byte, now time.Time, req *limiter.Request, resp *limiter.Response) []byte {
	b = append(b, `{"type":"call","t":`...)
	b = strconv.AppendInt(b, now.UnixMicro(), 10)
	b = append(b, `,"domain":`...)
	b = appendString(b, req.Domain)
	b = append(b, `,"hits":`...)
	b = strconv.AppendUint(b, uint64(req.Hits), 10)
	b = append(b, `,"code":"`...)
	b = append(b, resp.Code.String()...)
	b = append(b, `","descriptors":[`...)
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"entries":[`...)
		for j, e := range d.Entries {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"key":`...)
			b = appendString(b, e.Key)
			b = append(b, `,"value":`...)
			b = appendString(b, e.Value)
			b = append(b, '}')
		}
		b = append(b, ']')
		if d.HasHits {
			b = append(b, `,"hits":`...)
			b = strconv.AppendUint(b, d.Hits, 10)
		}
		if d.Refund {
			b = append(b, `,"refund":true`...)
		}
		if o := d.Override; o != nil {
			b = append(b, `,"override":{"requests_per_unit":`...)
			b = strconv.AppendUint(b, uint64(o.RequestsPerUnit), 10)
			b = append(b, `,"unit":`...)
			b = appendString(b, o.Unit.String())
			if o.UnitMultiplier != 0 {
				b = append(b, `,"unit_multiplier":`...)
				b = strconv.AppendUint(b, uint64(o.UnitMultiplier), 10)
			}
			b = append(b, '}')
		}
		code, rule, limit := "OK", "", ""
		if i < len(resp.Statuses) {
			st := &resp.Statuses[i]
			if st.Code == limiter.OverLimit {
				code = "OVER_LIMIT"
			}
			if st.Rule != nil {
				rule = st.Rule.Path
			}
			if st.Limit != nil {
				limit = st.Limit.Name
			}
		}
		b = append(b, `,"code":"`...)
		b = append(b, code...)
		b = append(b, '"')
		if rule != "" {
			b = append(b, `,"rule":`...)
			b = appendString(b, rule)
		}
		if limit != "" {
			b = append(b, `,"limit":`...)
			b = appendString(b, limit)
		}
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// as encoding/json writes it.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
