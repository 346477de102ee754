package descriptor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// listsFS is a configuration whose api_key values come partly from
// values files, around inline descriptors of the same key.
func listsFS() fstest.MapFS {
	return fstest.MapFS{
		"api.yaml": {Data: []byte(`domain: api
descriptors:
  - key: api_key
    value: sk_live_*
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: api_key
    values_file: lists/revoked.txt
    action: deny
  - key: api_key
    value: sk_test_1
    action: allow
  - key: api_key
    value: sk_*
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: api_key
    values_file: partners.txt
    rate_limit: {unit: minute, requests_per_unit: 1000}
    descriptors:
      - key: endpoint
        value: /bulk
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 60}
`)},
		"lists/revoked.txt": {Data: []byte(`# revoked keys
sk_live_revoked
sk_test_*
old_*
`)},
		"partners.txt": {Data: []byte("\ufeffacme\r\nglobex\r\n  partner_*  \r\n")},
	}
}

// TestValuesFileMatch checks that the values of a values file match as
// descriptors written in the list's place would: an exact value before
// every pattern, the patterns of the list in its place among the others,
// the key's default last; and that Explain names the file and line.
func TestValuesFileMatch(t *testing.T) {
	tree, err := LoadFS(listsFS(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := tree.Domain("api")
	tests := []struct {
		entries string
		rule    string // "" for none
		step    Step   // the last step's Kind, Pattern, File and Line
	}{
		{"api_key=sk_live_revoked", "api_key in lists/revoked.txt", Step{Kind: ExactMatch, File: "lists/revoked.txt", Line: 2}},
		{"api_key=sk_live_1", "api_key=sk_live_*", Step{Kind: WildcardMatch, Pattern: "sk_live_*", Line: 3}},
		{"api_key=sk_test_2", "api_key in lists/revoked.txt", Step{Kind: WildcardMatch, Pattern: "sk_test_*", File: "lists/revoked.txt", Line: 3}},
		{"api_key=sk_test_1", "api_key=sk_test_1", Step{Kind: ExactMatch, Line: 9}},
		{"api_key=old_key", "api_key in lists/revoked.txt", Step{Kind: WildcardMatch, Pattern: "old_*", File: "lists/revoked.txt", Line: 4}},
		{"api_key=sk_other", "api_key=sk_*", Step{Kind: WildcardMatch, Pattern: "sk_*", Line: 12}},
		{"api_key=acme", "api_key in partners.txt", Step{Kind: ExactMatch, File: "partners.txt", Line: 1}},
		{"api_key=globex", "api_key in partners.txt", Step{Kind: ExactMatch, File: "partners.txt", Line: 2}},
		{"api_key=partner_9", "api_key in partners.txt", Step{Kind: WildcardMatch, Pattern: "partner_*", File: "partners.txt", Line: 3}},
		{"api_key=acme,endpoint=/bulk", "api_key in partners.txt/endpoint=/bulk", Step{Kind: ExactMatch, Line: 19}},
		{"api_key=acme,endpoint=/other", "", Step{}},
		{"api_key=k1", "api_key", Step{Kind: DefaultMatch, Line: 22}},
		// Comments and blank lines are not values.
		{"api_key=# revoked keys", "api_key", Step{Kind: DefaultMatch, Line: 22}},
	}
	for _, tt := range tests {
		es := entries(tt.entries)
		got := ""
		if r := d.Match(es); r != nil {
			got = r.Path
		}
		if got != tt.rule {
			t.Errorf("Match(%s) = %q, want %q", tt.entries, got, tt.rule)
		}
		x := d.Explain(es)
		last := x.Steps[len(x.Steps)-1]
		last.Entry, last.Path = Entry{}, ""
		if last != tt.step {
			t.Errorf("Explain(%s) last step = %+v, want %+v", tt.entries, last, tt.step)
		}
		if n := testing.AllocsPerRun(100, func() { d.Match(es) }); n != 0 {
			t.Errorf("Match(%s) allocates %v times", tt.entries, n)
		}
	}

	want := `domain api (api.yaml)
  1. api_key=old_key: wildcard "old_*" -> api_key in lists/revoked.txt (lists/revoked.txt line 4)
rule api_key in lists/revoked.txt: deny, failure_mode=open
`
	if got := d.Explain(entries("api_key=old_key")).String(); got != want {
		t.Errorf("Explain(api_key=old_key):\n%s\nwant:\n%s", got, want)
	}
	want = `domain api (api.yaml)
  1. api_key=globex: exact -> api_key in partners.txt (partners.txt line 2)
  2. tier=x: no match
no rule: entry 2 (tier=x) matches no descriptor under api_key in partners.txt; keys there: endpoint
`
	if got := d.Explain(entries("api_key=globex,tier=x")).String(); got != want {
		t.Errorf("Explain(api_key=globex,tier=x):\n%s\nwant:\n%s", got, want)
	}
}

// TestValuesFileCandidates checks that an explanation sums a values file
// up among the alternatives rather than listing its values.
func TestValuesFileCandidates(t *testing.T) {
	fsys := fstest.MapFS{
		"a.yaml": {Data: []byte("domain: a\ndescriptors:\n  - key: t\n    value: x\n    descriptors:\n" +
			"      - key: k\n        value: inline\n        action: allow\n" +
			"      - key: k\n        values_file: deny.txt\n        action: deny\n")},
		"deny.txt": {Data: []byte("a\nb\nc*\n")},
	}
	tree, err := LoadFS(fsys, Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := tree.Domain("a").Explain(entries("t=x,k=zzz"))
	want := `entry 2 (k=zzz) matches no descriptor under t=x; descriptors of key "k" there: k=inline, t=x/k in deny.txt (2 values, 1 pattern, digest ` +
		tree.Domain("a").nodes[2].list.digest + ")"
	if x.Reason != want {
		t.Errorf("Reason = %q\nwant %q", x.Reason, want)
	}
}

// TestValuesFileMaxPatterns checks that every pattern of a values file
// counts against MaxPatterns, with the rule file's own, exact values not
// at all, and that the bound is reported once per file.
func TestValuesFileMaxPatterns(t *testing.T) {
	fsys := fstest.MapFS{
		"p.yaml": {Data: []byte("domain: p\ndescriptors:\n  - key: k\n    value: \"a*\"\n    action: deny\n" +
			"  - key: k\n    values_file: p.txt\n    action: deny\n")},
		"p.txt": {Data: []byte("x1\nb*\nx2\nc*\nd*\ne*\nx3\n")},
	}
	if _, err := LoadFS(fsys, Options{MaxPatterns: 5}); err != nil {
		t.Fatalf("5 patterns with MaxPatterns 5: %v", err)
	}
	_, err := LoadFS(fsys, Options{MaxPatterns: 3})
	want := `p.txt:5: k in p.txt: more than 3 wildcard values of key "k" at one level: a request tries them in turn (Options.MaxPatterns)`
	if err == nil || err.Error() != want {
		t.Errorf("5 patterns with MaxPatterns 3: %v, want %s", err, want)
	}
}

// TestValuesFileHash checks that the tree's hash follows the values of a
// values file, not their order, comments or spacing.
func TestValuesFileHash(t *testing.T) {
	hash := func(list string) string {
		fsys := listsFS()
		fsys["lists/revoked.txt"] = &fstest.MapFile{Data: []byte(list)}
		tree, err := LoadFS(fsys, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return tree.Hash()
	}
	base := hash("sk_live_revoked\nsk_test_*\nold_*\n")
	for _, same := range []string{
		"old_*\n# moved\nsk_test_*\n\n  sk_live_revoked\n",
		"sk_live_revoked\r\nsk_test_*\r\nold_*",
	} {
		if got := hash(same); got != base {
			t.Errorf("hash of %q differs", same)
		}
	}
	for _, different := range []string{
		"sk_live_revoked\nsk_test_*\n",
		"sk_live_revoked\nsk_test_*\nold_*\nsk_live_2\n",
		"sk_live_revokeD\nsk_test_*\nold_*\n",
		"sk_live_revoked\nsk_test*\nold_*\n",
	} {
		if got := hash(different); got == base {
			t.Errorf("hash of %q equals the base hash", different)
		}
	}
}

// TestValuesFiles checks that a tree names the values files it read, as
// errors name files, once each however many rules name them.
func TestValuesFiles(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a.yaml":          "domain: a\ndescriptors:\n  - key: k\n    values_file: lists/deny.txt\n    action: deny\n",
		"b.yaml":          "domain: b\ndescriptors:\n  - key: k\n    values_file: lists/deny.txt\n    action: deny\n  - key: j\n    values_file: allow\n    action: allow\n",
		"allow":           "x\n",
		"lists/deny.txt":  "y\n",
		"lists/other.txt": "not named by any rule\n",
	}
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tree, err := Load(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "allow"), filepath.Join(dir, "lists", "deny.txt")}
	if got := tree.ValuesFiles(); !slices.Equal(got, want) {
		t.Errorf("ValuesFiles() = %q, want %q", got, want)
	}
	for _, domain := range []string{"a", "b"} {
		if r := tree.Domain(domain).Match(entries("k=y")); r == nil || r.Action != ActionDeny {
			t.Errorf("domain %s: k=y resolves to %v, want the deny rule", domain, r)
		}
	}
	if (*Tree)(nil).ValuesFiles() != nil {
		t.Error("a nil tree names values files")
	}
}

// TestRefuseValuesFiles checks the error for rules that cannot name files,
// such as those delivered over xDS.
func TestRefuseValuesFiles(t *testing.T) {
	_, err := LoadFS(listsFS(), Options{RefuseValuesFiles: "xDS"})
	want := strings.Join([]string{
		"api.yaml:7: api_key in lists/revoked.txt: values_file: rules from xDS cannot name files; list the values as descriptors",
		"api.yaml:16: api_key in partners.txt: values_file: rules from xDS cannot name files; list the values as descriptors",
	}, "\n")
	if err == nil || err.Error() != want {
		t.Errorf("LoadFS = %v\nwant %s", err, want)
	}
}

// TestValuesFileTooManyErrors checks that a values file full of mistakes
// is reported up to the per-file error limit, then stops.
func TestValuesFileTooManyErrors(t *testing.T) {
	var list strings.Builder
	for range 3 * maxErrors {
		list.WriteString("same\n")
	}
	fsys := fstest.MapFS{
		"a.yaml":   {Data: []byte("domain: a\ndescriptors:\n  - key: k\n    values_file: dup.txt\n    action: deny\n")},
		"dup.txt":  {Data: []byte(list.String())},
		"ok.yaml":  {Data: []byte("domain: ok\n")},
		"dup2.txt": {Data: []byte("not named\n")},
	}
	_, err := LoadFS(fsys, Options{})
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxErrors+1 || lines[len(lines)-1] != "dup.txt:102: too many errors; stopping" {
		t.Errorf("%d lines, the last %q; want %d, the last the stop", len(lines), lines[len(lines)-1], maxErrors+1)
	}
}

// TestValuesFileNotUTF8 checks that a line that is not UTF-8, as in a
// binary file named by mistake, is an error with its line.
func TestValuesFileNotUTF8(t *testing.T) {
	fsys := fstest.MapFS{
		"a.yaml":  {Data: []byte("domain: a\ndescriptors:\n  - key: k\n    values_file: bin.txt\n    action: deny\n")},
		"bin.txt": {Data: []byte("ok\n\xff\xfe\x00\n")},
	}
	_, err := LoadFS(fsys, Options{})
	want := "bin.txt:2: k in bin.txt: values_file: the line is not valid UTF-8"
	if err == nil || err.Error() != want {
		t.Errorf("LoadFS = %v, want %s", err, want)
	}
}

func TestTrailingComment(t *testing.T) {
	for _, tt := range []struct {
		v    string
		want bool
	}{
		{"k1", false},
		{"k#1", false},
		{"a#b#c", false},
		{"k1 # revoked", true},
		{"k1\t#", true},
		{"a#b #c", true},
	} {
		if got := trailingComment(tt.v); got != tt.want {
			t.Errorf("trailingComment(%q) = %v, want %v", tt.v, got, tt.want)
		}
	}
}

// TestReadmeListExample loads the example of the README's "Lists in
// files": its rules, under a domain, and its list file.
func TestReadmeListExample(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n### Lists in files\n")
	if !ok {
		t.Fatal(`README.md has no "### Lists in files"`)
	}
	block := func(lang string) string {
		_, rest, ok := strings.Cut(section, "\n```"+lang+"\n")
		body, _, closed := strings.Cut(rest, "\n```\n")
		if !ok || !closed {
			t.Fatalf("the section has no %s block", lang)
		}
		return body + "\n"
	}
	fsys := fstest.MapFS{
		"api.yaml":               {Data: []byte("domain: api\n" + block("yaml"))},
		"lists/revoked-keys.txt": {Data: []byte(block("text"))},
	}
	tree, err := LoadFS(fsys, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := tree.Domain("api")
	for key, want := range map[string]string{
		"sk_live_4f9a0c7e": "api_key in lists/revoked-keys.txt",
		"sk_test_9":        "api_key in lists/revoked-keys.txt",
		"sk_live_other":    "api_key",
	} {
		if r := d.Match([]Entry{{Key: "api_key", Value: key}}); r == nil || r.Path != want {
			t.Errorf("api_key=%s resolves to %v, want %s", key, r, want)
		}
	}
}
