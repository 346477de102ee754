package limiter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tollgatehq/tollgate/internal/benchtest"
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
// and a counted key that no list holds. The machine is shared, so the two
// alternate in rounds of 1000 calls within one loop, and the benchmark
// reports each one's ns per call and the ratio of the two.
func BenchmarkCheckDenyList(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name          string
		plain, listed string
		want          Code
	}{
		{"denied", listBenchKey(0), listBenchKey(99_999), OverLimit},
		{"counted", "sk_live_not_listed_0000000000000000000000", "sk_live_not_listed_0000000000000000000000", OK},
	} {
		var checks [2]func()
		for i, list := range []bool{false, true} {
			tree := listBenchTree(b, list)
			lim, err := New(Options{Store: memory.New(memory.Options{}), Tree: func() *descriptor.Tree { return tree }})
			if err != nil {
				b.Fatal(err)
			}
			key := bc.plain
			if list {
				key = bc.listed
			}
			r := &Request{Domain: "api", Descriptors: []Descriptor{{Entries: []descriptor.Entry{{Key: "api_key", Value: key}}}}}
			checks[i] = func() {
				resp, err := lim.Check(ctx, r)
				if err != nil || resp.Code != bc.want {
					b.Fatalf("Check = %+v, %v; want %s", resp, err, bc.want)
				}
			}
		}
		b.Run(bc.name, func(b *testing.B) {
			benchtest.Interleave(b, "plain", checks[0], "list", checks[1])
		})
	}
}
