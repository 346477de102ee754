package descriptor

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
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
