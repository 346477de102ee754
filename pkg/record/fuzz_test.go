package record_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/record"
)

// FuzzReader feeds the Reader arbitrary recordings: it returns lines or
// an error wrapping ErrFormat, never panics, and every call it accepts
// has a domain, descriptors with entries and a known code.
func FuzzReader(f *testing.F) {
	const header = `{"type":"header","version":1,"rules_hash":"h","start":"2026-11-28T17:00:00Z","sample":1,"key":"","overrides":[]}` + "\n"
	f.Add([]byte(header))
	f.Add([]byte(header + `{"type":"call","t":1,"domain":"api","hits":0,"code":"OK","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits":0,"code":"OK","rule":"k","limit":"n"}]}` + "\n"))
	f.Add([]byte(header + `{"type":"override","t":1,"change":"created","override":{"id":"o","domain":"api","entries":[],"multiplier":2,"expires_at":"2026-11-28T18:00:00Z","created_at":"2026-11-28T17:00:00Z"}}` + "\n"))
	f.Add([]byte(header + `{"type":"call","t":1,"domain":"api","hits":0,"code":"OK","descriptors":[{"entries":[{"key":"k","value":"v"}],"override":{"requests_per_unit":1,"unit":"second"},"code":"OVER_LIMIT"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rd := record.NewReader(bytes.NewReader(data))
		for {
			l, err := rd.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				if !errors.Is(err, record.ErrFormat) {
					t.Fatalf("error %v does not wrap ErrFormat", err)
				}
				return
			}
			if c := l.Call; c != nil {
				if c.Domain == "" || len(c.Descriptors) == 0 {
					t.Fatalf("accepted call %+v", c)
				}
				for _, d := range c.Descriptors {
					if len(d.Entries) == 0 || (d.Code != "OK" && d.Code != "OVER_LIMIT") {
						t.Fatalf("accepted descriptor %+v", d)
					}
				}
			}
		}
	})
}

// FuzzReplay replays arbitrary recordings through rules of every
// algorithm, beside a baseline, at a fuzzed scale: it returns a report
// or an error wrapping ErrFormat, never panics, and the report's counts
// agree with each other.
func FuzzReplay(f *testing.F) {
	const header = `{"type":"header","version":1,"rules_hash":"h","start":"2026-11-28T17:00:00Z","sample":1,"key":"","overrides":[]}` + "\n"
	call := func(t int, client, op, extra string) string {
		return fmt.Sprintf(`{"type":"call","t":%d,"domain":"api","hits":1,"code":"OK","descriptors":[{"entries":[{"key":"client","value":%q},{"key":"op","value":%q}]%s,"code":"OK"}]}`+"\n", t, client, op, extra)
	}
	f.Add([]byte(header+call(1, "c1", "fixed", "")+call(2, "c1", "fixed", `,"hits":30`)), uint8(1))
	f.Add([]byte(header+call(1, "c1", "log", "")+call(1, "c1", "log", "")+call(0, "c2", "penalized", `,"refund":true,"hits":3`)), uint8(4))
	f.Add([]byte(header+`{"type":"override","t":1,"change":"created","override":{"id":"o","domain":"api","entries":[{"key":"client","value":"c1"}],"limit":{"requests_per_unit":1,"unit":"hour"},"expires_at":"2026-11-28T18:00:00Z","created_at":"2026-11-28T17:00:00Z"}}`+"\n"+
		call(2, "c1", "counter", `,"override":{"requests_per_unit":1,"unit":"second"}`)), uint8(0))
	f.Add([]byte(header+call(9223372036854775807, "c1", "tokens", `,"hits":18446744073709551615`)+call(-9223372036854775808, "", "fixed", "")), uint8(255))
	tree := loadRules(f, exactRules)
	lower := loadRules(f, strings.ReplaceAll(exactRules, "requests_per_unit: 5,", "requests_per_unit: 1,"))
	f.Fuzz(func(t *testing.T, data []byte, scale uint8) {
		rep, err := record.Replay(context.Background(), []record.Input{{Name: "fuzz", R: bytes.NewReader(data)}},
			record.ReplayOptions{Rules: lower, Baseline: tree, Scale: float64(scale) / 16})
		if err != nil {
			if !errors.Is(err, record.ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		if rep.NewlyRejected > rep.RejectedAfter || rep.NewlyAdmitted > rep.RejectedBefore || rep.RejectedAfter > rep.Calls ||
			rep.Decisions < 2*rep.Calls || rep.Reproduction.Differ > rep.Reproduction.Compared {
			t.Fatalf("report = %+v", rep)
		}
		var before, after int64
		for _, r := range rep.Rules {
			before += r.NewlyAdmitted.Total
			after += r.NewlyRejected.Total
		}
		if (rep.NewlyRejected > 0) != (after > 0) || (rep.NewlyAdmitted > 0) != (before > 0) {
			t.Fatalf("calls newly rejected %d, admitted %d; descriptors %d, %d", rep.NewlyRejected, rep.NewlyAdmitted, after, before)
		}
		if err := rep.WriteText(io.Discard); err != nil {
			t.Fatal(err)
		}
	})
}
