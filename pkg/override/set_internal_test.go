package override

import (
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// TestLimitsCacheStartsAgainWhenFull checks that an override seen with
// more rules than it caches, as across many reloads, still caches the
// limits of the rule requests reach now instead of making them anew for
// every request.
func TestLimitsCacheStartsAgainWhenFull(t *testing.T) {
	set := NewSet([]Override{{ID: "x", Domain: "d", Entries: []descriptor.Entry{{Key: "k", Value: "v"}}, Multiplier: 2,
		ExpiresAt: time.Now().Add(time.Hour)}})
	lv := set.Match("d", []descriptor.Entry{{Key: "k", Value: "v"}}, time.Now())
	if lv == nil {
		t.Fatal("no override matched")
	}
	limits := []descriptor.Limit{{Unit: descriptor.Minute, UnitMultiplier: 1, RequestsPerUnit: 10}}
	for range maxCached + 1 {
		lv.Limits(&descriptor.Rule{}, limits) // a rule of an older tree
	}
	live := &descriptor.Rule{}
	first := lv.Limits(live, limits)
	if again := lv.Limits(live, limits); &again[0] != &first[0] {
		t.Fatal("the limits of a rule seen after the cache filled are made anew at every call")
	}
	if first[0].RequestsPerUnit != 20 {
		t.Fatalf("requests per unit %d, want 20", first[0].RequestsPerUnit)
	}
}
