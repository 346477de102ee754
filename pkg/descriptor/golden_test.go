package descriptor

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite the expected output of testdata/*.txt")

// splitGolden splits a golden case, a testdata/*.txt parsed as a txtar
// archive (golang.org/x/tools/txtar), into its input files and its
// expectation: the name ("want" or "error") and text of its section that
// holds the expected dump or error text. The archive's comment describes
// the case.
func splitGolden(a *txtar.Archive) (inputs []txtar.File, kind, expected string) {
	for _, f := range a.Files {
		switch f.Name {
		case "want", "error":
			kind, expected = f.Name, string(f.Data)
		default:
			inputs = append(inputs, f)
		}
	}
	return inputs, kind, expected
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
			a, err := txtar.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			inputs, wantKind, want := splitGolden(a)
			fsys := fstest.MapFS{}
			for _, f := range inputs {
				fsys[f.Name] = &fstest.MapFile{Data: f.Data}
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
				a.Files = append(inputs, txtar.File{Name: kind, Data: []byte(got)})
				if err := os.WriteFile(path, txtar.Format(a), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if kind != wantKind {
				t.Fatalf("got %s section, want %s section:\n%s", kind, wantKind, got)
			}
			if got != want {
				t.Errorf("%s mismatch\n--- got ---\n%s--- want ---\n%s", kind, got, want)
			}
		})
	}
}
