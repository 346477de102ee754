package record_test

import (
	"bytes"
	"errors"
	"io"
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
