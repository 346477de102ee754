package descriptor

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// loadOne loads a single configuration file.
func loadOne(t testing.TB, yaml string) *Tree {
	t.Helper()
	tree, err := LoadFS(fstest.MapFS{"test.yaml": {Data: []byte(yaml)}}, Options{})
	if err != nil {
		t.Fatalf("LoadFS: %v", err)
	}
	return tree
}

// entries parses "k=v,k2=v2" ("k=" is an empty value).
func entries(s string) []Entry {
	if s == "" {
		return nil
	}
	var out []Entry
	for part := range strings.SplitSeq(s, ",") {
		k, v, _ := strings.Cut(part, "=")
		out = append(out, Entry{Key: k, Value: v})
	}
	return out
}

const matchConfig = `
domain: match
descriptors:
  # The example of the package documentation.
  - key: api_key
    value: sk_test_*
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: api_key
    value: sk_*
    action: allow
  - key: api_key
    value: sk_test_vip
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: endpoint
        value: /search
        rate_limit: {unit: minute, requests_per_unit: 30}

  # Keys and values stay apart: envoyproxy/ratelimit would join both to "a_b_c".
  - key: a_b
    value: c
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: b_c
    rate_limit: {unit: second, requests_per_unit: 2}

  # Wildcards anywhere in the value.
  - key: host
    value: "*.internal"
    action: allow
  - key: host
    value: "api-*-v*.example.com"
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: host
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 4}

  # share_threshold: every matching value shares the pattern's counter.
  - key: tenant
    value: acme-*
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: tenant
    descriptors:
      - key: user
        value: bot-*
        share_threshold: true
        rate_limit: {unit: second, requests_per_unit: 6}

  # A node with children only; an empty leaf (envoyproxy/ratelimit's "whitelist").
  - key: group
    descriptors:
      - key: member
        rate_limit: {unit: second, requests_per_unit: 7}
  - key: leaf
    value: x
  - key: leaf
    rate_limit: {unit: second, requests_per_unit: 8}

  # Empty request values.
  - key: maybe
    value: "x*"
    rate_limit: {unit: second, requests_per_unit: 9}
  - key: maybe
    rate_limit: {unit: second, requests_per_unit: 10}
`

func TestMatch(t *testing.T) {
	d := loadOne(t, matchConfig).Domain("match")
	tests := []struct {
		name    string
		entries string
		want    string // Rule.Path, or "" for no rule
		kinds   []MatchKind
		shared  []string
	}{
		{"exact beats wildcards", "api_key=sk_test_vip", "api_key=sk_test_vip", []MatchKind{ExactMatch}, []string{""}},
		{"first wildcard in config order", "api_key=sk_test_1", "api_key=sk_test_*", []MatchKind{WildcardMatch}, []string{""}},
		{"later wildcard", "api_key=sk_live_1", "api_key=sk_*", []MatchKind{WildcardMatch}, []string{""}},
		{"default", "api_key=k1", "api_key", []MatchKind{DefaultMatch}, []string{""}},
		{"default then exact", "api_key=k1,endpoint=/search", "api_key/endpoint=/search", []MatchKind{DefaultMatch, ExactMatch}, []string{"", ""}},
		{"no fallback to the parent", "api_key=k1,endpoint=/users", "", []MatchKind{DefaultMatch, NoMatch}, nil},
		{"no backtracking from a wildcard to the default", "api_key=sk_test_1,endpoint=/search", "", []MatchKind{WildcardMatch, NoMatch}, nil},
		{"unknown key", "nope=1", "", []MatchKind{NoMatch}, nil},
		{"no entries", "", "", nil, nil},

		{"key a_b value c", "a_b=c", "a_b=c", []MatchKind{ExactMatch}, []string{""}},
		{"key a value b_c", "a=b_c", "a=b_c", []MatchKind{ExactMatch}, []string{""}},
		{"no join of key and value", "a_b_c=", "", []MatchKind{NoMatch}, nil},
		{"no join of key and value 2", "a=b", "", []MatchKind{NoMatch}, nil},

		{"leading star", "host=db.internal", "host=*.internal", []MatchKind{WildcardMatch}, []string{""}},
		{"stars in the middle", "host=api-eu-v2.example.com", "host=api-*-v*.example.com", []MatchKind{WildcardMatch}, []string{""}},
		{"stars in the middle, no match", "host=api-eu.example.com", "host=*", []MatchKind{WildcardMatch}, []string{""}},
		{"lone star matches the empty value", "host=", "host=*", []MatchKind{WildcardMatch}, []string{""}},

		{"share_threshold at level 0", "tenant=acme-1,user=u1", "tenant=acme-*/user", []MatchKind{WildcardMatch, DefaultMatch}, []string{"acme-*", ""}},
		{"share_threshold at level 1", "tenant=other,user=bot-7", "tenant/user=bot-*", []MatchKind{DefaultMatch, WildcardMatch}, []string{"", "bot-*"}},
		{"share_threshold node without rule", "tenant=acme-1", "", []MatchKind{WildcardMatch}, nil},

		{"grouping node has no rule", "group=g", "", []MatchKind{DefaultMatch}, nil},
		{"deeper than the tree", "group=g,member=m,extra=1", "", []MatchKind{DefaultMatch, DefaultMatch, NoMatch}, nil},
		{"empty leaf shadows the default", "leaf=x", "", []MatchKind{ExactMatch}, nil},
		{"default beside an empty leaf", "leaf=y", "leaf", []MatchKind{DefaultMatch}, []string{""}},

		{"empty value takes the default", "maybe=", "maybe", []MatchKind{DefaultMatch}, []string{""}},
		{"prefix wildcard", "maybe=xyz", "maybe=x*", []MatchKind{WildcardMatch}, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es := entries(tt.entries)
			r := d.Match(es)
			got := ""
			if r != nil {
				got = r.Path
			}
			if got != tt.want {
				t.Fatalf("Match(%s) = %q, want %q", tt.entries, got, tt.want)
			}
			x := d.Explain(es)
			if x.Rule != r {
				t.Errorf("Explain(%s).Rule = %v, want Match's %v", tt.entries, x.Rule, r)
			}
			if (x.Reason == "") != (r != nil) {
				t.Errorf("Explain(%s).Reason = %q with rule %v", tt.entries, x.Reason, r)
			}
			var kinds []MatchKind
			for _, s := range x.Steps {
				kinds = append(kinds, s.Kind)
			}
			if !slices.Equal(kinds, tt.kinds) {
				t.Errorf("Explain(%s) kinds = %v, want %v", tt.entries, kinds, tt.kinds)
			}
			if r != nil && !slices.Equal(r.Shared, tt.shared) {
				t.Errorf("Shared = %q, want %q", r.Shared, tt.shared)
			}
		})
	}
}

func TestMatchRuleContents(t *testing.T) {
	d := loadOne(t, matchConfig).Domain("match")
	if r := d.Match(entries("api_key=sk_live_1")); r.Action != ActionAllow || len(r.Limits) != 0 {
		t.Errorf("allow rule = %+v", r)
	}
	r := d.Match(entries("api_key=k1,endpoint=/search"))
	if len(r.Limits) != 1 || r.Limits[0].RequestsPerUnit != 30 || r.Limits[0].Unit != Minute {
		t.Errorf("limits = %+v", r.Limits)
	}
}

func TestMatchNil(t *testing.T) {
	var tree *Tree
	if d := tree.Domain("x"); d != nil {
		t.Fatal("nil tree has a domain")
	}
	var d *Domain
	if r := d.Match(entries("a=b")); r != nil {
		t.Errorf("nil domain matched %v", r)
	}
	if x := d.Explain(entries("a=b")); x.Rule != nil || x.Reason == "" {
		t.Errorf("nil domain explained %+v", x)
	}
	if got := loadOne(t, matchConfig).Domain("other"); got != nil {
		t.Errorf("unknown domain = %v", got)
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	d := loadOne(t, matchConfig).Domain("match")
	for _, s := range []string{"api_key=sk_test_1", "api_key=k1,endpoint=/search", "host=api-eu-v2.example.com", "tenant=acme-1,user=u"} {
		es := entries(s)
		if n := testing.AllocsPerRun(100, func() { d.Match(es) }); n != 0 {
			t.Errorf("Match(%s) allocates %v times", s, n)
		}
	}
}

func TestGlob(t *testing.T) {
	tests := []struct {
		pattern, value string
		want           bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"a*", "a", true},
		{"a*", "ba", false},
		{"*a", "ba", true},
		{"*a", "ab", false},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"a*b*c", "abc", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "acb", false},
		{"a**b", "ab", true},
		{"*ab*ab*", "abab", true},
		{"*ab*ab*", "aba", false},
		{"x*y*x", "xyx", true},
		{"x*y*x", "xyyx", true},
		{"x*y*x", "xy", false},
		{"日*本", "日本", true},
		{"日*本", "日x本", true},
	}
	for _, tt := range tests {
		g := compileGlob(tt.pattern)
		if got := g.match(tt.value); got != tt.want {
			t.Errorf("glob %q match %q = %v, want %v", tt.pattern, tt.value, got, tt.want)
		}
	}
}

func TestExplainString(t *testing.T) {
	d := loadOne(t, matchConfig).Domain("match")
	tests := []struct {
		entries string
		want    string
	}{
		{"api_key=sk_test_1", `domain match (test.yaml)
  1. api_key=sk_test_1: wildcard "sk_test_*" -> api_key=sk_test_* (line 5)
rule api_key=sk_test_*: limit, failure_mode=open
  10 per minute, token_bucket
`},
		{"api_key=k1,endpoint=/users", `domain match (test.yaml)
  1. api_key=k1: default -> api_key (line 14)
  2. endpoint=/users: no match
no rule: entry 2 (endpoint=/users) matches no descriptor under api_key; descriptors of key "endpoint" there: endpoint=/search
`},
		{"group=g", `domain match (test.yaml)
  1. group=g: default -> group (line 55)
no rule: group has no rate_limit, rate_limits or action of its own: it only groups nested descriptors, so a descriptor must continue to one of them
`},
		{"leaf=x,more=1", `domain match (test.yaml)
  1. leaf=x: exact -> leaf=x (line 59)
  2. more=1: no match
no rule: entry 2 (more=1) goes deeper than the configuration: leaf=x has no nested descriptors
`},
	}
	for _, tt := range tests {
		if got := d.Explain(entries(tt.entries)).String(); got != tt.want {
			t.Errorf("Explain(%s):\n%s\nwant:\n%s", tt.entries, got, tt.want)
		}
	}
}
