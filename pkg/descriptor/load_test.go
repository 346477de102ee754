package descriptor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("symlinks unavailable: %v", err)
	}
}

// TestLoadConfigMapLayout loads a directory laid out as Kubernetes mounts
// a ConfigMap: the files live in a timestamped directory, "..data" links
// to it, and the top-level names link through "..data".
func TestLoadConfigMapLayout(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "..2026_01_02_03_04_05.123", "api.yaml"),
		"domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	writeFile(t, filepath.Join(dir, "..2026_01_02_03_04_05.123", "web.yml"), "domain: web\n")
	symlink(t, "..2026_01_02_03_04_05.123", filepath.Join(dir, "..data"))
	symlink(t, "..data/api.yaml", filepath.Join(dir, "api.yaml"))
	symlink(t, "..data/web.yml", filepath.Join(dir, "web.yml"))

	tree, err := Load(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tree.Domains(), []string{"api", "web"}; !slices.Equal(got, want) {
		t.Fatalf("Domains() = %v, want %v", got, want)
	}
	if r := tree.Domain("api").Match(entries("k=v")); r == nil {
		t.Error("api has no rule for k")
	}
	if got, want := tree.Domain("api").File(), filepath.Join(dir, "api.yaml"); got != want {
		t.Errorf("File() = %q, want %q", got, want)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "good.yaml"), "domain: good\n")
	writeFile(t, filepath.Join(dir, "sub", "bad.yaml"), "domain: bad\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	symlink(t, "missing.yaml", filepath.Join(dir, "dangling.yaml"))

	tree, err := Load(dir, Options{})
	if tree != nil {
		t.Error("a broken directory returned a tree")
	}
	if err == nil {
		t.Fatal("no error")
	}
	var cfgErr *Error
	if !errors.As(err, &cfgErr) {
		t.Fatalf("error %v holds no *Error", err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d errors, want 2:\n%v", len(lines), err)
	}
	if !strings.HasPrefix(lines[0], filepath.Join(dir, "dangling.yaml")+": ") {
		t.Errorf("first error %q does not name the dangling symlink", lines[0])
	}
	if want := filepath.Join(dir, "sub", "bad.yaml") + `:4: a: rate_limit: unknown unit "fortnight"`; !strings.HasPrefix(lines[1], want) {
		t.Errorf("second error %q, want prefix %q", lines[1], want)
	}
}

func TestLoadMissingDirectory(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "nope"), Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrNotExist", err)
	}
}

func TestLoadDefaultAlgorithm(t *testing.T) {
	fsys := fstest.MapFS{
		"a.yaml": {Data: []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
		"b.yaml": {Data: []byte("domain: b\ndefaults: {algorithm: fixed_window}\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
	}
	tests := []struct {
		opt    algorithm.Kind
		wantA  algorithm.Kind
		wantB  algorithm.Kind
		errors bool
	}{
		{0, algorithm.TokenBucket, algorithm.FixedWindow, false},
		{algorithm.SlidingWindowLog, algorithm.SlidingWindowLog, algorithm.FixedWindow, false},
		{algorithm.Kind(99), 0, 0, true},
	}
	for _, tt := range tests {
		tree, err := LoadFS(fsys, Options{DefaultAlgorithm: tt.opt})
		if tt.errors {
			if err == nil {
				t.Errorf("DefaultAlgorithm %v: no error", tt.opt)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		a := tree.Domain("a").Match(entries("k=1")).Limits[0].Algorithm
		b := tree.Domain("b").Match(entries("k=1")).Limits[0].Algorithm
		if a != tt.wantA || b != tt.wantB {
			t.Errorf("DefaultAlgorithm %v: a=%v b=%v, want %v %v", tt.opt, a, b, tt.wantA, tt.wantB)
		}
	}
}

func TestLoadDefaultFailureMode(t *testing.T) {
	fsys := fstest.MapFS{
		"a.yaml": {Data: []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
		"b.yaml": {Data: []byte("domain: b\ndefaults: {failure_mode: local}\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
	}
	for _, opt := range []FailureMode{FailOpen, FailClosed} {
		tree, err := LoadFS(fsys, Options{DefaultFailureMode: opt})
		if err != nil {
			t.Fatal(err)
		}
		a := tree.Domain("a").Match(entries("k=1")).FailureMode
		b := tree.Domain("b").Match(entries("k=1")).FailureMode
		if a != opt || b != FailLocal {
			t.Errorf("DefaultFailureMode %v: a=%v b=%v, want %v local", opt, a, b, opt)
		}
	}
	if _, err := LoadFS(fsys, Options{DefaultFailureMode: 9}); err == nil {
		t.Error("DefaultFailureMode 9: no error")
	}
}

// TestLoadDefaultCharge checks that Options.DefaultCharge applies where
// neither a limit nor its domain's defaults name a charge, and that a
// limit's own charge and its domain's defaults win over it.
func TestLoadDefaultCharge(t *testing.T) {
	fsys := fstest.MapFS{
		"a.yaml": {Data: []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n" +
			"  - key: own\n    rate_limit: {unit: second, requests_per_unit: 1, charge: admitted}\n")},
		"b.yaml": {Data: []byte("domain: b\ndefaults: {charge: admitted}\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
		"c.yaml": {Data: []byte("domain: c\ndefaults: {charge: always}\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
	}
	tests := []struct {
		opt            algorithm.Charge
		wantA, wantOwn algorithm.Charge
		wantB, wantC   algorithm.Charge
		wantErr        string
	}{
		{opt: algorithm.ChargeAdmitted, wantA: algorithm.ChargeAdmitted, wantOwn: algorithm.ChargeAdmitted, wantB: algorithm.ChargeAdmitted, wantC: algorithm.ChargeAlways},
		{opt: algorithm.ChargeAlways, wantA: algorithm.ChargeAlways, wantOwn: algorithm.ChargeAdmitted, wantB: algorithm.ChargeAdmitted, wantC: algorithm.ChargeAlways},
		{opt: algorithm.Charge(7), wantErr: "invalid Options.DefaultCharge 7"},
	}
	for _, tt := range tests {
		tree, err := LoadFS(fsys, Options{DefaultCharge: tt.opt})
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("DefaultCharge %v: error %v, want %q", tt.opt, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		charge := func(domain, e string) algorithm.Charge {
			l := tree.Domain(domain).Match(entries(e)).Limits[0]
			if l.Algo().Charge != l.Charge {
				t.Errorf("%s %s: Algo().Charge = %v, want %v", domain, e, l.Algo().Charge, l.Charge)
			}
			return l.Charge
		}
		got := [4]algorithm.Charge{charge("a", "k=1"), charge("a", "own=1"), charge("b", "k=1"), charge("c", "k=1")}
		if want := [4]algorithm.Charge{tt.wantA, tt.wantOwn, tt.wantB, tt.wantC}; got != want {
			t.Errorf("DefaultCharge %v: a, a own, b, c = %v, want %v", tt.opt, got, want)
		}
	}
}

// TestLoadDefaultPrecision checks that Options.DefaultPrecision applies
// where neither a limit nor its domain's defaults name a precision, that a
// limit's own precision and its domain's defaults win over it, and that it
// leaves a sliding_window_log limit strict.
func TestLoadDefaultPrecision(t *testing.T) {
	fsys := fstest.MapFS{
		"a.yaml": {Data: []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n" +
			"  - key: own\n    rate_limit: {unit: second, requests_per_unit: 1, precision: strict}\n" +
			"  - key: log\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_window_log}\n")},
		"b.yaml": {Data: []byte("domain: b\ndefaults: {precision: strict}\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
		"c.yaml": {Data: []byte("domain: c\ndefaults: {precision: cached}\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
	}
	const s, c = PrecisionStrict, PrecisionCached
	tests := []struct {
		opt     Precision
		want    [5]Precision // a k, a own, a log, b k, c k
		wantErr string
	}{
		{opt: s, want: [5]Precision{s, s, s, s, c}},
		{opt: c, want: [5]Precision{c, s, s, s, c}},
		{opt: Precision(7), wantErr: "invalid Options.DefaultPrecision 7"},
	}
	for _, tt := range tests {
		tree, err := LoadFS(fsys, Options{DefaultPrecision: tt.opt})
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("DefaultPrecision %v: error %v, want %q", tt.opt, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		precision := func(domain, e string) Precision {
			return tree.Domain(domain).Match(entries(e)).Limits[0].Precision
		}
		got := [5]Precision{precision("a", "k=1"), precision("a", "own=1"), precision("a", "log=1"), precision("b", "k=1"), precision("c", "k=1")}
		if got != tt.want {
			t.Errorf("DefaultPrecision %v: a, a own, a log, b, c = %v, want %v", tt.opt, got, tt.want)
		}
		if !tree.Cached() {
			t.Errorf("DefaultPrecision %v: Cached() = false, want true (domain c)", tt.opt)
		}
	}
}

// TestTreeCached checks that Tree.Cached sees a cached limit anywhere, and
// only then.
func TestTreeCached(t *testing.T) {
	tests := []struct {
		yaml string
		opts Options
		want bool
	}{
		{"domain: d\n", Options{}, false},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n", Options{}, false},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n", Options{DefaultPrecision: PrecisionCached}, true},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_window_log}\n", Options{DefaultPrecision: PrecisionCached}, false},
		{"domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: n\n        rate_limits:\n" +
			"          - {unit: second, requests_per_unit: 1}\n          - {unit: hour, requests_per_unit: 9, precision: cached}\n", Options{}, true},
	}
	for i, tt := range tests {
		tree, err := LoadFS(fstest.MapFS{"a.yaml": {Data: []byte(tt.yaml)}}, tt.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := tree.Cached(); got != tt.want {
			t.Errorf("case %d: Cached() = %v, want %v", i, got, tt.want)
		}
	}
	if (*Tree)(nil).Cached() {
		t.Error("nil Tree: Cached() = true")
	}
}

func TestParsePrecision(t *testing.T) {
	tests := []struct {
		in      string
		want    Precision
		wantErr string
	}{
		{"strict", PrecisionStrict, ""},
		{"CACHED", PrecisionCached, ""},
		{"", 0, `unknown precision "" (want strict or cached)`},
		{"exact", 0, `unknown precision "exact" (want strict or cached)`},
	}
	for _, tt := range tests {
		got, err := ParsePrecision(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("ParsePrecision(%q): error %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want || got.String() != strings.ToLower(tt.in) {
			t.Errorf("ParsePrecision(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	if got := Precision(9).String(); got != "precision(9)" {
		t.Errorf("Precision(9).String() = %q", got)
	}
}

func TestLoadMaxPatterns(t *testing.T) {
	yaml := "domain: p\ndescriptors:\n"
	for _, v := range []string{"a*", "b*", "c", "d*"} {
		yaml += "  - key: k\n    value: \"" + v + "\"\n    action: deny\n"
	}
	fsys := fstest.MapFS{"p.yaml": {Data: []byte(yaml)}}
	if _, err := LoadFS(fsys, Options{MaxPatterns: 3}); err != nil {
		t.Fatalf("3 patterns with MaxPatterns 3: %v", err)
	}
	_, err := LoadFS(fsys, Options{MaxPatterns: 2})
	want := `p.yaml:12: k=d*: more than 2 wildcard values of key "k" at one level: a request tries them in turn (Options.MaxPatterns)`
	if err == nil || err.Error() != want {
		t.Errorf("3 patterns with MaxPatterns 2: %v, want %s", err, want)
	}
}

func TestHash(t *testing.T) {
	base := "domain: h\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	hash := func(files map[string]string, opts Options) string {
		fsys := fstest.MapFS{}
		for name, data := range files {
			fsys[name] = &fstest.MapFile{Data: []byte(data)}
		}
		tree, err := LoadFS(fsys, opts)
		if err != nil {
			t.Fatal(err)
		}
		return tree.Hash()
	}
	h := hash(map[string]string{"a.yaml": base}, Options{})
	if len(h) != 64 {
		t.Fatalf("Hash() = %q, want 64 hex digits", h)
	}
	same := []map[string]string{
		{"renamed.yml": base},
		{"a.yaml": "# a comment\n" + strings.ReplaceAll(base, "{unit: second, requests_per_unit: 1}", "\n      unit: SECOND\n      requests_per_unit: 1")},
	}
	for _, files := range same {
		if got := hash(files, Options{}); got != h {
			t.Errorf("hash of %v differs", files)
		}
	}
	different := []struct {
		files map[string]string
		opts  Options
	}{
		{map[string]string{"a.yaml": strings.Replace(base, "requests_per_unit: 1", "requests_per_unit: 2", 1)}, Options{}},
		{map[string]string{"a.yaml": base, "b.yaml": "domain: other\n"}, Options{}},
		{map[string]string{"a.yaml": base + "  - key: k\n    value: v\n"}, Options{}},
		{map[string]string{"a.yaml": base}, Options{DefaultAlgorithm: algorithm.FixedWindow}},
		{map[string]string{"a.yaml": base}, Options{DefaultCharge: algorithm.ChargeAlways}},
		{map[string]string{"a.yaml": base}, Options{DefaultPrecision: PrecisionCached}},
	}
	for _, tt := range different {
		if got := hash(tt.files, tt.opts); got == h {
			t.Errorf("hash of %v %+v equals the base hash", tt.files, tt.opts)
		}
	}
}

func TestErrorFormat(t *testing.T) {
	tests := []struct {
		err  Error
		want string
	}{
		{Error{File: "a.yaml", Line: 3, Path: "k=v", Msg: "bad"}, "a.yaml:3: k=v: bad"},
		{Error{File: "a.yaml", Line: 3, Msg: "bad"}, "a.yaml:3: bad"},
		{Error{File: "a.yaml", Msg: "bad"}, "a.yaml: bad"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestWriteTo(t *testing.T) {
	tree := loadOne(t, matchConfig)
	var b strings.Builder
	n, err := tree.WriteTo(&b)
	if err != nil || int(n) != b.Len() || b.String() != tree.String() {
		t.Errorf("WriteTo = %d, %v; wrote %d bytes", n, err, b.Len())
	}
	if !strings.Contains(b.String(), `  a_b=c: limit`) || !strings.Contains(b.String(), `  a=b_c: limit`) {
		t.Errorf("dump lacks the colliding keys:\n%s", b.String())
	}
}

func TestAliasBomb(t *testing.T) {
	// Every level holds ten descriptors that each nest the level before:
	// 10^7 descriptors once aliases are expanded.
	var b strings.Builder
	b.WriteString("domain: bomb\nx: &l0 [{key: leaf}]\n")
	for i := 1; i <= 7; i++ {
		fmt.Fprintf(&b, "x%d: &l%d [", i, i)
		for j := range 10 {
			fmt.Fprintf(&b, "{key: k%d, descriptors: *l%d}, ", j, i-1)
		}
		b.WriteString("]\n")
	}
	b.WriteString("descriptors: *l7\n")
	_, err := LoadFS(fstest.MapFS{"b.yaml": {Data: []byte(b.String())}}, Options{})
	if err == nil || !strings.Contains(err.Error(), "YAML nodes") {
		t.Fatalf("alias bomb: %v", err)
	}
}

func TestTooManyErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: many\ndescriptors:\n")
	for range 500 {
		b.WriteString("  - {}\n")
	}
	_, err := LoadFS(fstest.MapFS{"m.yaml": {Data: []byte(b.String())}}, Options{})
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxErrors+1 || !strings.HasSuffix(lines[maxErrors], "too many errors; stopping") {
		t.Errorf("got %d errors, last %q", len(lines), lines[len(lines)-1])
	}
}
