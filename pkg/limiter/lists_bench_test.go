package limiter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
)

// listBenchKey returns the i-th key of the benchmark deny list: 40
// characters, like an API key.
func listBenchKey(i int) string {
	return fmt.Sprintf("sk_live_%032x", uint64(i)*0x9e3779b97f4a7c15)
}

// listBenchTree returns a domain that denies some api_key values and
// counts the others: with list, the 100 000 keys of a values file; without,
// one inline value, the plain rule the list is measured against.
func listBenchTree(b *testing.B, list bool) *descriptor.Tree {
	const counted = "  - key: api_key\n    rate_limit: {unit: day, requests_per_unit: 4000000000}\n"
	fsys := fstest.MapFS{}
	if list {
		var l strings.Builder
		for i := range 100_000 {
			l.WriteString(listBenchKey(i) + "\n")
		}
		fsys["revoked.txt"] = &fstest.MapFile{Data: []byte(l.String())}
		fsys["api.yaml"] = &fstest.MapFile{Data: []byte("domain: api\ndescriptors:\n  - key: api_key\n    values_file: revoked.txt\n    action: deny\n" + counted)}
	} else {
		fsys["api.yaml"] = &fstest.MapFile{Data: []byte("domain: api\ndescriptors:\n  - key: api_key\n    value: " + listBenchKey(0) + "\n    action: deny\n" + counted)}
	}
	tree, err := descriptor.LoadFS(fsys, descriptor.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return tree
}

// BenchmarkCheckDenyList compares a whole Check against a 100 000-line
// deny list with one against a plain rule: a denied key (the list's last)
// and a counted key that no list holds. The plain and list cases alternate
// within one run.
func BenchmarkCheckDenyList(b *testing.B) {
	for _, bc := range []struct {
		name string
		key  string
		want Code
	}{
		{"denied", listBenchKey(99_999), OverLimit},
		{"counted", "sk_live_not_listed_0000000000000000000000", OK},
	} {
		for _, list := range []bool{false, true} {
			tree := listBenchTree(b, list)
			key, name := bc.key, bc.name+"/list100k"
			if !list {
				name = bc.name + "/plain"
				if bc.want == OverLimit {
					key = listBenchKey(0)
				}
			}
			lim, err := New(Options{Store: memory.New(memory.Options{}), Tree: func() *descriptor.Tree { return tree }})
			if err != nil {
				b.Fatal(err)
			}
			r := &Request{Domain: "api", Descriptors: []Descriptor{{Entries: []descriptor.Entry{{Key: "api_key", Value: key}}}}}
			ctx := context.Background()
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					resp, err := lim.Check(ctx, r)
					if err != nil || resp.Code != bc.want {
						b.Fatalf("Check = %+v, %v; want %s", resp, err, bc.want)
					}
				}
			})
		}
	}
}
