package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// loadTestingSection is the README's section on load tests.
const loadTestingSection = "## Load testing"

// codeSpan matches an inline code span of Markdown.
var codeSpan = regexp.MustCompile("`([^`]+)`")

// TestReadmeCommands parses, with the load test's own flags, every
// command of the README's load-testing section that runs it, and every
// code span there that starts with one of its flags (as
// `-redis-latency 0,0.5ms,2ms`), so that the section names no flag, section
// or value the load test would refuse.
func TestReadmeCommands(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "\n"+loadTestingSection+"\n")
	if start < 0 {
		t.Fatalf("README.md has no %q", loadTestingSection)
	}
	section := text[start+1:]
	if end := strings.Index(section[len(loadTestingSection):], "\n## "); end >= 0 {
		section = section[:len(loadTestingSection)+end]
	}
	section = withoutFences(section)
	const command = "go run ./integration/loadtest"
	commands, spans := 0, 0
	for _, m := range codeSpan.FindAllStringSubmatch(section, -1) {
		span := m[1]
		var args []string
		switch {
		case strings.HasPrefix(span, command):
			args = strings.Fields(strings.TrimPrefix(span, command))
			commands++
		case strings.HasPrefix(span, "-") && !strings.HasPrefix(span, "--") && isLoadTestFlag(span):
			args = strings.Fields(span)
			spans++
		default:
			continue
		}
		if _, _, err := parseFlags(args); err != nil {
			t.Errorf("README.md, %s: `%s`: %v", loadTestingSection, span, err)
		}
	}
	if commands == 0 || spans == 0 {
		t.Errorf("README.md, %s: %d commands and %d flags of the load test checked, want some of each", loadTestingSection, commands, spans)
	}
}

// isLoadTestFlag reports whether span starts with a flag of the load
// test.
func isLoadTestFlag(span string) bool {
	fs, _, _ := newFlagSet(&config{}, &proxyRequest{})
	name, _, _ := strings.Cut(strings.TrimPrefix(strings.Fields(span)[0], "-"), "=")
	return fs.Lookup(name) != nil
}

// withoutFences drops the fenced code blocks of Markdown text, whose
// backticks are not code spans.
func withoutFences(text string) string {
	var b strings.Builder
	fenced := false
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(line)
		}
	}
	return b.String()
}
