package xds_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/xds"
)

// FuzzBuild builds a tree from one RateLimitConfig resource whose bytes are
// arbitrary. It asserts that Build never panics, and that a tree it
// returns says what the proto said and no more:
//
//   - its one domain is the config's domain;
//   - it has one descriptor node per descriptor of the proto (counted in
//     the tree's dump), so no rule the proto did not have;
//   - a descriptor reached by exact values alone (no "*" and no empty
//     value on its path) matches a rule with the proto's rate limit:
//     unlimited, or one limit of its unit, count and name, with its
//     replaces, shadow mode, quota mode, detailed metric and metadata
//     (its values and nesting exactly).
func FuzzBuild(f *testing.F) {
	limit := func(unit rlsconfv3.RateLimitUnit, n uint32) *rlsconfv3.RateLimitPolicy {
		return &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}
	}
	for _, cfg := range []*rlsconfv3.RateLimitConfig{
		perMinute("default/eg/http", "eg", "rule-0", "*", 10),
		{Name: "nested", Domain: "eg", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "rule-0", Value: "*", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
				Key: "user",
				RateLimit: &rlsconfv3.RateLimitPolicy{
					Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 10, Name: "per-user",
					Replaces: []*rlsconfv3.RateLimitReplace{{Name: "global"}},
				},
			}}},
			{Key: "rule-1", Value: "a: b", ShadowMode: true, DetailedMetric: true, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 5, Name: "global"}},
			{Key: "vip", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
		}},
		{Name: "unlimited with a unit", Domain: "eg", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "vip", Value: "gold", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, Unit: rlsconfv3.RateLimitUnit_DAY, RequestsPerUnit: 3}},
		}},
		{Name: "exact", Domain: "api", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "k", Value: "v", RateLimit: limit(rlsconfv3.RateLimitUnit_DAY, 4294967295), Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "k", Value: "v", RateLimit: limit(rlsconfv3.RateLimitUnit_HOUR, 1)},
				{Key: "path", Value: "/a\n- key: b", RateLimit: limit(rlsconfv3.RateLimitUnit_SECOND, 2)},
			}},
			{Key: "yes", Value: "no"},
			{Key: "#", Value: "&anchor"},
			{Key: "k", Value: "'quoted' \"twice\"", RateLimit: limit(rlsconfv3.RateLimitUnit_MINUTE, 0)},
		}},
		{Name: "quota", Domain: "ai-gateway-quota", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "backend_name", Value: "default/openai", Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "rule-0-x-api-key|premium-match-0", Value: "rule-0-x-api-key|premium-match-0", RateLimit: limit(rlsconfv3.RateLimitUnit_WEEK, 100), ShadowMode: true, QuotaMode: true},
				{Key: "model_name_override", RateLimit: limit(rlsconfv3.RateLimitUnit_YEAR, 50), QuotaMode: true},
			},
		}}},
		{Name: "metadata", Domain: "m", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "k", Value: "v", RateLimit: limit(rlsconfv3.RateLimitUnit_MONTH, 1),
			Metadata: mustStruct(f, map[string]any{"yes": "on", "010": "1e3", "n": 1e21, "small": 5e-324, "neg": -0.5,
				"list": []any{nil, true, "~", []any{}, map[string]any{}}, "deep": map[string]any{"y": map[string]any{"": "", "<<": "merge"}}}),
		}}},
		{Name: "no domain", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k"}}},
		{Name: "dup", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k", Value: "v"}, {Key: "k", Value: "v"}}},
		{Name: ".hidden", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "", Value: "v"}}},
		{Name: "unknown unit", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k", RateLimit: limit(99, 1)}}},
		{},
	} {
		data, err := proto.Marshal(cfg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	// A field of RateLimitConfig this version does not know.
	known, _ := proto.Marshal(perMinute("r", "d", "k", "v", 1))
	f.Add(protowire.AppendVarint(protowire.AppendTag(known, 99, protowire.VarintType), 1))

	f.Fuzz(func(t *testing.T, data []byte) {
		tree, err := xds.Build([]*anypb.Any{{TypeUrl: xds.TypeURL, Value: data}}, descriptor.Options{})
		if err != nil {
			return
		}
		cfg := new(rlsconfv3.RateLimitConfig)
		if err := proto.Unmarshal(data, cfg); err != nil {
			t.Fatalf("Build accepted bytes that do not decode: %v", err)
		}
		if got := tree.Domains(); !slices.Equal(got, []string{cfg.GetDomain()}) {
			t.Fatalf("domains %q, want %q\nconfig: %s", got, cfg.GetDomain(), prototext.Format(cfg))
		}
		nodes := 0
		for line := range strings.Lines(tree.String()) {
			if strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") {
				nodes++
			}
		}
		if want := countDescriptors(cfg.GetDescriptors()); nodes != want {
			t.Fatalf("the tree has %d descriptors, the proto %d\nconfig: %s\ntree:\n%s", nodes, want, prototext.Format(cfg), tree)
		}
		checkExact(t, tree.Domain(cfg.GetDomain()), nil, cfg.GetDescriptors())
	})
}

// countDescriptors returns the number of descriptors in ds, nested ones
// included.
func countDescriptors(ds []*rlsconfv3.RateLimitDescriptor) int {
	n := len(ds)
	for _, d := range ds {
		n += countDescriptors(d.GetDescriptors())
	}
	return n
}

// checkExact fails t unless every descriptor of ds under the entries path
// that exact values alone reach matches a rule of d as the proto says.
func checkExact(t *testing.T, d *descriptor.Domain, path []descriptor.Entry, ds []*rlsconfv3.RateLimitDescriptor) {
	t.Helper()
	for _, pd := range ds {
		if pd.GetValue() == "" || strings.Contains(pd.GetValue(), "*") {
			continue
		}
		entries := append(slices.Clip(path), descriptor.Entry{Key: pd.GetKey(), Value: pd.GetValue()})
		rule, p := d.Match(entries), pd.GetRateLimit()
		switch {
		case p == nil:
			if rule != nil && (len(rule.Limits) > 0 || rule.Unlimited) {
				t.Fatalf("%v: a rule %+v where the proto has no rate limit", entries, rule)
			}
		case rule == nil:
			t.Fatalf("%v: no rule for the proto's %v", entries, p)
		case rule.Unlimited != p.GetUnlimited(),
			rule.ShadowMode != pd.GetShadowMode(), rule.QuotaMode != pd.GetQuotaMode(), rule.DetailedMetric != pd.GetDetailedMetric(),
			len(rule.Replaces) != len(p.GetReplaces()):
			t.Fatalf("%v: rule %+v for the proto's %v", entries, rule, pd)
		case !p.GetUnlimited() && (len(rule.Limits) != 1 || rule.Limits[0].RequestsPerUnit != p.GetRequestsPerUnit() ||
			rule.Limits[0].Name != p.GetName() || !strings.EqualFold(rule.Limits[0].Unit.String(), p.GetUnit().String())):
			t.Fatalf("%v: limits %+v for the proto's %v", entries, rule.Limits, p)
		}
		if p != nil {
			var want map[string]any
			if len(pd.GetMetadata().GetFields()) > 0 {
				want = pd.GetMetadata().AsMap()
			}
			if !reflect.DeepEqual(rule.Metadata, want) {
				t.Fatalf("%v: metadata %#v for the proto's %#v", entries, rule.Metadata, want)
			}
		}
		for i, r := range p.GetReplaces() {
			if rule.Replaces[i] != r.GetName() {
				t.Fatalf("%v: replaces %q for the proto's %v", entries, rule.Replaces, p.GetReplaces())
			}
		}
		checkExact(t, d, entries, pd.GetDescriptors())
	}
}
