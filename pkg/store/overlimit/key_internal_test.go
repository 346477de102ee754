package overlimit

import (
	"reflect"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// TestParseKey checks that parseKey recovers every counter appendKey
// encodes, whatever its strings hold, and refuses what it did not build.
func TestParseKey(t *testing.T) {
	for _, c := range []store.Counter{
		{Domain: "d", Entries: []store.Entry{{Key: "k", Value: "v"}}, Shard: "v", Kind: algorithm.TokenBucket, Period: 1_000_000},
		{Domain: "", Entries: nil, Shard: "", Kind: algorithm.SlidingWindowLog, Period: 0},
		{Domain: "3:d\x00", Entries: []store.Entry{{Key: "a:b", Value: "\x00"}, {Key: "", Value: "12:"}}, Shard: "{x}",
			Kind: algorithm.FixedWindow, Period: 86_400_000_000},
	} {
		k := string(appendKey(nil, &c))
		got, ok := parseKey(k)
		if !ok || !reflect.DeepEqual(got, c) {
			t.Errorf("parseKey(%q) = %+v, %v, want %+v", k, got, ok, c)
		}
	}
	for _, k := range []string{"", "1", "1\x002", "x\x001\x001:d0:", "1\x00x\x001:d0:", "300\x001\x001:d0:", "1\x001\x009:d0:", "1\x001\x001:d0:1:k"} {
		if c, ok := parseKey(k); ok {
			t.Errorf("parseKey(%q) = %+v, want a refusal", k, c)
		}
	}
}
