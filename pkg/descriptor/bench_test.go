package descriptor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tollgatehq/tollgate/internal/benchtest"
)

// benchConfig returns a domain of 10 101 descriptors: 90 tenants and a
// wildcard, each with 10 users and a default, each with 8 endpoints and a
// wildcard, limited at the third level.
func benchConfig() string {
	var b strings.Builder
	b.WriteString("domain: bench\ndescriptors:\n")
	endpoints := func(indent string) {
		fmt.Fprintf(&b, "%sdescriptors:\n", indent)
		for e := range 8 {
			fmt.Fprintf(&b, "%s  - key: endpoint\n%s    value: /e%d\n%s    rate_limit: {unit: minute, requests_per_unit: %d}\n", indent, indent, e, indent, 10+e)
		}
		fmt.Fprintf(&b, "%s  - key: endpoint\n%s    value: /v*/items/*\n%s    rate_limit: {unit: minute, requests_per_unit: 5}\n", indent, indent, indent)
	}
	users := func(indent string) {
		fmt.Fprintf(&b, "%sdescriptors:\n", indent)
		for u := range 10 {
			fmt.Fprintf(&b, "%s  - key: user\n%s    value: u%d\n", indent, indent, u)
			endpoints(indent + "    ")
		}
		fmt.Fprintf(&b, "%s  - key: user\n", indent)
		endpoints(indent + "    ")
	}
	for t := range 90 {
		fmt.Fprintf(&b, "  - key: tenant\n    value: t%d\n", t)
		users("    ")
	}
	b.WriteString("  - key: tenant\n    value: beta-*\n")
	users("    ")
	return b.String()
}

func BenchmarkMatch(b *testing.B) {
	config := benchConfig()
	tree, err := LoadFS(fstest.MapFS{"bench.yaml": {Data: []byte(config)}}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	d := tree.Domain("bench")
	if n := len(d.nodes); n != 10101 {
		b.Fatalf("tree has %d descriptors", n)
	}
	for _, bc := range []struct{ name, entries string }{
		{"exact", "tenant=t57,user=u3,endpoint=/e7"},
		{"wildcard+default", "tenant=beta-42,user=someone,endpoint=/v2/items/123"},
		{"miss", "tenant=t57,user=u3,endpoint=/nope"},
	} {
		es := entries(bc.entries)
		if (d.Match(es) == nil) != (bc.name == "miss") {
			b.Fatalf("%s: Match = %v", bc.name, d.Match(es))
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d.Match(es)
			}
		})
	}
}

func BenchmarkLoad(b *testing.B) {
	fsys := fstest.MapFS{"bench.yaml": {Data: []byte(benchConfig())}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadFS(fsys, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// listKey returns the i-th key of a benchmark deny list: 40 characters,
// like an API key.
func listKey(i int) string {
	return fmt.Sprintf("sk_live_%032x", uint64(i)*0x9e3779b97f4a7c15)
}

// listFiles returns a domain whose api_key values are denied, counted at
// 60 a minute otherwise. With list, the denied values are the lines of
// lists/revoked.txt, 100 000 keys under a comment; without, the one
// inline value listKey(0): the plain rule the list is measured against.
func listFiles(list bool) map[string]string {
	const rest = "  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 60}\n"
	if !list {
		return map[string]string{"api.yaml": "domain: api\ndescriptors:\n  - key: api_key\n    value: " + listKey(0) + "\n    action: deny\n" + rest}
	}
	var b strings.Builder
	b.WriteString("# Revoked keys, one per line.\n")
	for i := range 100_000 {
		b.WriteString(listKey(i))
		b.WriteByte('\n')
	}
	return map[string]string{
		"api.yaml":          "domain: api\ndescriptors:\n  - key: api_key\n    values_file: lists/revoked.txt\n    action: deny\n" + rest,
		"lists/revoked.txt": b.String(),
	}
}

// BenchmarkMatchList compares a Match against a 100 000-line deny list
// with one against a plain rule, for a denied key (the last of the list)
// and a key that falls through to the default. The machine is shared, so
// the two alternate in rounds of 1000 calls within one loop, and the
// benchmark reports each one's ns per call and the ratio of the two.
func BenchmarkMatchList(b *testing.B) {
	domains := map[bool]*Domain{}
	for _, list := range []bool{false, true} {
		fsys := fstest.MapFS{}
		for name, data := range listFiles(list) {
			fsys[name] = &fstest.MapFile{Data: []byte(data)}
		}
		tree, err := LoadFS(fsys, Options{})
		if err != nil {
			b.Fatal(err)
		}
		domains[list] = tree.Domain("api")
	}
	for _, bc := range []struct {
		name          string
		plain, listed string
		deny          bool
	}{
		{"denied", listKey(0), listKey(99_999), true},
		{"counted", "sk_live_not_listed_0000000000000000000000", "sk_live_not_listed_0000000000000000000000", false},
	} {
		plain := []Entry{{Key: "api_key", Value: bc.plain}}
		listed := []Entry{{Key: "api_key", Value: bc.listed}}
		for list, es := range map[bool][]Entry{false: plain, true: listed} {
			if r := domains[list].Match(es); r == nil || (r.Action == ActionDeny) != bc.deny {
				b.Fatalf("%s, list %v: Match = %+v", bc.name, list, r)
			}
		}
		b.Run(bc.name, func(b *testing.B) {
			benchtest.Interleave(b,
				"plain", func() { domains[false].Match(plain) },
				"list", func() { domains[true].Match(listed) })
		})
	}
}

// BenchmarkLoadList measures loading a directory that holds a 100 000-line
// deny list, against the same rules with one inline value: read, decode,
// validate, hash.
func BenchmarkLoadList(b *testing.B) {
	for _, list := range []bool{false, true} {
		dir := b.TempDir()
		for name, data := range listFiles(list) {
			p := filepath.Join(dir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		name := "plain"
		if list {
			name = "list100k"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Load(dir, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
