package descriptor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"golang.org/x/tools/txtar"
)

// FuzzLoad loads arbitrary bytes as a configuration file. Loading must not
// panic, must return either a tree or an error, and a loaded tree must
// answer Match and Explain alike for descriptors made of the file's words.
func FuzzLoad(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.txt")
	for _, path := range paths {
		a, err := txtar.ParseFile(path)
		if err != nil {
			f.Fatal(err)
		}
		inputs, _, _ := splitGolden(a)
		for _, file := range inputs {
			f.Add(file.Data)
		}
	}
	examples, _ := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	for _, path := range examples {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(matchConfig))
	f.Add([]byte("domain: d\ndescriptors: &x [{key: a, descriptors: *x}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tree, err := LoadFS(fstest.MapFS{"fuzz.yaml": {Data: data}}, Options{})
		if (tree == nil) == (err == nil) {
			t.Fatalf("LoadFS returned tree %v and error %v", tree != nil, err)
		}
		if err != nil {
			return
		}
		_ = tree.String()
		words := strings.FieldsFunc(string(data), func(r rune) bool {
			return strings.ContainsRune(" \n\t:-{}[],\"'", r)
		})
		if len(words) > 16 {
			words = words[:16]
		}
		for _, name := range tree.Domains() {
			d := tree.Domain(name)
			for n := 1; n <= 3 && n <= len(words); n++ {
				var es []Entry
				for i := range n {
					es = append(es, Entry{Key: words[i], Value: words[len(words)-1-i]})
				}
				r := d.Match(es)
				x := d.Explain(es)
				if x.Rule != r {
					t.Fatalf("Explain(%v).Rule = %v, Match = %v", es, x.Rule, r)
				}
				_ = x.String()
			}
			for _, n := range d.nodes {
				es := make([]Entry, n.depth)
				for m := n; m != nil; m = m.parent {
					es[m.depth-1] = Entry{Key: m.key, Value: m.value}
				}
				if r := d.Match(es); r != nil && n.rule != nil && !n.wildcard && n.list == nil && r != n.rule {
					t.Fatalf("Match(%v) = %s, want the node's own rule %s", es, r.Path, n.rule.Path)
				}
			}
		}
	})
}

// FuzzValuesFile loads arbitrary bytes as a values file beside an inline
// value and pattern of the same key. Loading must not panic, must return
// either a tree or an error, and in a loaded tree every value line of the
// file must resolve to the list's rule unless an inline value of the same
// key comes first, with Explain agreeing with Match.
func FuzzValuesFile(f *testing.F) {
	f.Add([]byte("k1\nk2\n# comment\n\nsk_*\n"))
	f.Add([]byte("\ufeffa\r\nb*c*d\r\n"))
	f.Add([]byte("dup\ndup\n"))
	f.Add([]byte("inline\n"))
	f.Add([]byte("x # not a comment\n\xff\n"))
	const rules = "domain: d\ndescriptors:\n  - key: k\n    value: inline\n    action: allow\n" +
		"  - key: k\n    value: \"in*\"\n    action: allow\n" +
		"  - key: k\n    values_file: l.txt\n    action: deny\n"
	f.Fuzz(func(t *testing.T, data []byte) {
		tree, err := LoadFS(fstest.MapFS{"d.yaml": {Data: []byte(rules)}, "l.txt": {Data: data}}, Options{MaxPatterns: 50})
		if (tree == nil) == (err == nil) {
			t.Fatalf("LoadFS returned tree %v and error %v", tree != nil, err)
		}
		if err != nil {
			return
		}
		d := tree.Domain("d")
		for line := range strings.Lines(strings.TrimPrefix(string(data), "\ufeff")) {
			v := strings.TrimSpace(line)
			if v == "" || v[0] == '#' {
				continue
			}
			es := []Entry{{Key: "k", Value: v}}
			r := d.Match(es)
			if x := d.Explain(es); x.Rule != r {
				t.Fatalf("Explain(%q).Rule = %v, Match = %v", v, x.Rule, r)
			}
			// "inline" is an inline exact value; a pattern of the list
			// that, as a value, matches the inline "in*" before it is
			// taken there: exact values first, then patterns in order.
			inlineFirst := v == "inline" || (strings.HasPrefix(v, "in") && strings.Contains(v, "*"))
			if !inlineFirst && (r == nil || r.Action != ActionDeny) {
				t.Fatalf("value %q of the list resolves to %v, want the deny rule", v, r)
			}
		}
	})
}
