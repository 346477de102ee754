package descriptor

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

var update = flag.Bool("update", false, "rewrite the expected output of testdata/*.txt")

// goldenCase is one testdata file: a comment, input files and the expected
// dump ("want") or error text ("error"), in sections that each start with
// a line "-- name --".
type goldenCase struct {
	comment  string
	files    []goldenFile
	kind     string // "want" or "error"
	expected string
}

type goldenFile struct {
	name, data string
}

func parseGolden(text string) goldenCase {
	var c goldenCase
	var name string
	var body strings.Builder
	flush := func() {
		switch name {
		case "":
			c.comment = body.String()
		case "want", "error":
			c.kind, c.expected = name, body.String()
		default:
			c.files = append(c.files, goldenFile{name, body.String()})
		}
		body.Reset()
	}
	for line := range strings.Lines(text) {
		trimmed := strings.TrimSuffix(line, "\n")
		if strings.HasPrefix(trimmed, "-- ") && strings.HasSuffix(trimmed, " --") && len(trimmed) > 6 {
			flush()
			name = trimmed[3 : len(trimmed)-3]
			continue
		}
		body.WriteString(line)
	}
	flush()
	return c
}

func (c goldenCase) format() string {
	var b strings.Builder
	b.WriteString(c.comment)
	for _, f := range c.files {
		b.WriteString("-- " + f.name + " --\n" + f.data)
	}
	b.WriteString("-- " + c.kind + " --\n" + c.expected)
	return b.String()
}

// TestGolden loads the input files of each testdata/*.txt and compares the
// tree's dump, or the error text, with the file's expectation. Run
// `go test ./pkg/descriptor -update` to rewrite the expectations.
func TestGolden(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no testdata/*.txt")
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c := parseGolden(string(raw))
			fsys := fstest.MapFS{}
			for _, f := range c.files {
				fsys[f.name] = &fstest.MapFile{Data: []byte(f.data)}
			}
			tree, err := LoadFS(fsys, Options{})
			kind, got := "want", ""
			if err != nil {
				if tree != nil {
					t.Errorf("LoadFS returned a tree and an error")
				}
				kind, got = "error", err.Error()+"\n"
			} else {
				got = tree.String()
			}
			if *update {
				c.kind, c.expected = kind, got
				if err := os.WriteFile(path, []byte(c.format()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if kind != c.kind {
				t.Fatalf("got %s section, want %s section:\n%s", kind, c.kind, got)
			}
			if got != c.expected {
				t.Errorf("%s mismatch\n--- got ---\n%s--- want ---\n%s", kind, got, c.expected)
			}
		})
	}
}
