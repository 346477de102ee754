package limiter

import (
	"strconv"
	"testing"
	"time"
)

const headersYAML = `
domain: api
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window, name: burst}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: fixed_window}
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 4, burst: 6, algorithm: token_bucket, name: 'odd "name"'}
`

func TestHeaderStyles(t *testing.T) {
	// Within the limits, [b=1] has the least remaining (2 of 3 per hour,
	// resetting in 3590 s) and is reported.
	okReq := req("api", d("a=1"), d("b=1"))
	overBody := `{"code":429,"message":"rate limit exceeded","limit":3,"window":3600,"retry_after_seconds":3590,"reset_at":"2026-01-01T01:00:00Z"}`
	tests := []struct {
		name      string
		style     HeaderStyle
		exhaustB  bool
		want      []Header
		wantBody  string
		wantCode  Code
		extraReqs int
	}{
		{
			name:  "none",
			style: HeadersNone,
			want:  nil,
		},
		{
			name:  "xratelimit",
			style: HeadersXRateLimit,
			want:  []Header{{HeaderXLimit, "3"}, {HeaderXRemaining, "2"}, {HeaderXReset, "1767229200"}},
		},
		{
			name:  "draft03",
			style: HeadersDraft03,
			want:  []Header{{HeaderDraftLimit, "3, 10;w=60, 3;w=3600"}, {HeaderDraftRemaining, "2"}, {HeaderDraftReset, "3590"}},
		},
		{
			name:  "ietf",
			style: HeadersIETF,
			want:  []Header{{HeaderIETFPolicy, `"burst";q=10;w=60, "b";q=3;w=3600`}, {HeaderIETF, `"b";r=2;t=3590`}},
		},
		{
			name:     "none over the limit",
			style:    HeadersNone,
			exhaustB: true,
			wantCode: OverLimit,
			want:     []Header{{HeaderRetryAfter, "3590"}, {HeaderContentType, "application/json"}},
			wantBody: overBody,
		},
		{
			name:     "ietf over the limit",
			style:    HeadersIETF,
			exhaustB: true,
			wantCode: OverLimit,
			want: []Header{
				{HeaderIETFPolicy, `"burst";q=10;w=60, "b";q=3;w=3600`}, {HeaderIETF, `"b";r=0;t=3590`},
				{HeaderRetryAfter, "3590"}, {HeaderContentType, "application/json"},
			},
			wantBody: overBody,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, headersYAML, func(o *Options) { o.HeaderStyle = tt.style })
			if tt.exhaustB {
				for range 3 {
					f.check(t, req("api", d("b=1")))
				}
			}
			resp := f.check(t, okReq)
			if want := max(tt.wantCode, OK); resp.Code != want {
				t.Errorf("Code = %v, want %v", resp.Code, want)
			}
			assertHeaders(t, resp.Headers, tt.want)
			if string(resp.Body) != tt.wantBody {
				t.Errorf("Body = %s, want %s", resp.Body, tt.wantBody)
			}
		})
	}
}

func TestHeadersTokenBucket(t *testing.T) {
	// A token bucket reports its capacity (requests plus burst) and an IETF
	// name escaped as a structured-field string.
	f := newFixture(t, headersYAML, func(o *Options) { o.HeaderStyle = HeadersIETF })
	resp := f.check(t, req("api", d("tb=1")))
	st := resp.Statuses[0]
	if st.Code != OK || st.Remaining != 9 {
		t.Fatalf("status = %s, want OK with 9 remaining", fmtStatus(st))
	}
	assertHeaders(t, resp.Headers, []Header{
		{HeaderIETFPolicy, `"odd \"name\"";q=10;w=1`},
		{HeaderIETF, `"odd \"name\"";r=9;t=` + strconv.FormatInt(ceilSeconds(st.ResetAfter), 10)},
	})
}

func assertHeaders(t *testing.T, got, want []Header) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("Headers = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Headers[%d] = %q, want %q", i, got[i], want[i])
		}
	}
}

func TestAppendSFString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{"api_key=*/endpoint=/search", `"api_key=*/endpoint=/search"`},
		{`q"b\s`, `"q\"b\\s"`},
		{"tab\there", `"tab?here"`},
		{"é", `"??"`},
		{"", `""`},
	}
	for _, tt := range tests {
		if got := string(appendSFString(nil, tt.in)); got != tt.want {
			t.Errorf("appendSFString(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestCeil(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int64
	}{
		{0, 0}, {-time.Second, 0}, {time.Nanosecond, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2},
	}
	for _, tt := range tests {
		if got := ceilSeconds(tt.d); got != tt.want {
			t.Errorf("ceilSeconds(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
	if got := ceilUnix(time.Unix(100, 1)); got != 101 {
		t.Errorf("ceilUnix(100.000000001) = %d, want 101", got)
	}
	if got := ceilUnix(time.Unix(100, 0)); got != 100 {
		t.Errorf("ceilUnix(100) = %d, want 100", got)
	}
}

func TestParseHeaderStyle(t *testing.T) {
	tests := []struct {
		in      string
		want    HeaderStyle
		wantErr bool
	}{
		{"none", HeadersNone, false},
		{"draft03", HeadersDraft03, false},
		{"XRateLimit", HeadersXRateLimit, false},
		{"ietf", HeadersIETF, false},
		{"rfc", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseHeaderStyle(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseHeaderStyle(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil && got.String() != map[HeaderStyle]string{HeadersNone: "none", HeadersDraft03: "draft03", HeadersXRateLimit: "xratelimit", HeadersIETF: "ietf"}[got] {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
}
