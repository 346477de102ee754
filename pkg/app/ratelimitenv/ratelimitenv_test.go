package ratelimitenv

import (
	"flag"
	"log/slog"
	"os"
	"strings"
	"testing"
)

var updateReadme = flag.Bool("update-readme", false, "rewrite README.md's envoyproxy/ratelimit environment table")

// TestTableInReadme keeps the README's environment table what
// the mapping does.
func TestTableInReadme(t *testing.T) {
	data, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- ratelimit-env-table: generated from pkg/app/ratelimitenv -->\n", "<!-- /ratelimit-env-table -->"
	_, rest, ok := strings.Cut(string(data), begin)
	table, _, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		t.Fatalf("README.md has no %q ... %q block", begin, end)
	}
	if want := Table(); *updateReadme && table != want {
		out := strings.Replace(string(data), begin+table+end, begin+want+end, 1)
		if err := os.WriteFile("../../../README.md", []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if table != want {
		t.Errorf("README.md's environment table differs from the mapping (go test ./pkg/app/ratelimitenv -run TableInReadme -update-readme); want:\n%s", want)
	}
}

// TestVarsTable checks the table's own consistency: each
// variable once, and each without an Apply read by another row.
func TestVarsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range vars() {
		if seen[r.Name] {
			t.Errorf("%s: listed twice", r.Name)
		}
		seen[r.Name] = true
		if r.Note == "" {
			t.Errorf("%s: no note", r.Name)
		}
		if r.Apply == nil && !strings.HasPrefix(r.Note, "read ") {
			t.Errorf("%s: no Apply, and the note does not say which row reads it", r.Name)
		}
	}
}

// TestReportLog pins the start-up lines: names, never values,
// each warning once, and nothing outside ratelimit's environment.
func TestReportLog(t *testing.T) {
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	for _, tt := range []struct {
		report Report
		want   string
	}{
		{Report{Honoured: []string{"PORT"}}, ""},
		{Report{ChargeAlways: true, XDS: true},
			`level=INFO msg="rules over xDS: default charge always, as envoyproxy/ratelimit counts (--default-charge admitted opts out)"` + "\n"},
		{Report{Active: true, Honoured: []string{"RUNTIME_ROOT"}, ChargeAlways: true},
			`level=INFO msg="envoyproxy/ratelimit environment honoured" variables=RUNTIME_ROOT` + "\n" +
				`level=INFO msg="envoyproxy/ratelimit environment: default charge always, as envoyproxy/ratelimit counts"` + "\n"},
		{Report{Active: true, Honoured: []string{"RUNTIME_ROOT", "REDIS_AUTH"}, Warnings: []string{"USE_STATSD: ignored"}, FixedWindow: true, ChargeAlways: true, NoHeaders: true},
			`level=INFO msg="envoyproxy/ratelimit environment honoured" variables=RUNTIME_ROOT,REDIS_AUTH` + "\n" +
				`level=INFO msg="envoyproxy/ratelimit environment: default algorithm fixed_window, default charge always, as envoyproxy/ratelimit counts"` + "\n" +
				`level=INFO msg="envoyproxy/ratelimit environment: response headers none, as envoyproxy/ratelimit sends none without LIMIT_RESPONSE_HEADERS_ENABLED"` + "\n" +
				`level=WARN msg="envoyproxy/ratelimit environment: USE_STATSD: ignored"` + "\n"},
	} {
		var buf strings.Builder
		tt.report.Log(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime})))
		if buf.String() != tt.want {
			t.Errorf("log\n%s\nwant\n%s", buf.String(), tt.want)
		}
	}
}
