package descriptor

import (
	"fmt"
	"slices"
	"strings"
)

// MatchKind says how one descriptor entry matched a configured descriptor.
type MatchKind uint8

// The ways an entry can match, in the order Match tries them.
const (
	NoMatch       MatchKind = iota // no descriptor at this level matches
	ExactMatch                     // the descriptor's key and value equal the entry's
	WildcardMatch                  // the descriptor's value is a pattern the entry's value matches
	DefaultMatch                   // the descriptor has the entry's key and no value
)

var matchKindNames = [...]string{NoMatch: "no match", ExactMatch: "exact", WildcardMatch: "wildcard", DefaultMatch: "default"}

// String returns the name of k, such as "wildcard".
func (k MatchKind) String() string {
	if int(k) >= len(matchKindNames) {
		return fmt.Sprintf("match(%d)", k)
	}
	return matchKindNames[k]
}

// Step is how one entry of a descriptor matched.
type Step struct {
	Entry Entry
	Kind  MatchKind
	// Pattern is the matched descriptor's value when Kind is WildcardMatch.
	Pattern string
	// Path names the matched descriptor; empty when Kind is NoMatch.
	Path string
	// File is the values file that holds the matched value or pattern, or
	// "" when the domain's file does.
	File string
	// Line is where the matched value is defined: in File when it is set,
	// else in the domain's file; 0 when Kind is NoMatch.
	Line int
}

// Explanation tells how Match resolves a descriptor, for `tollgate
// explain`.
type Explanation struct {
	Domain string
	File   string // the domain's file
	// Steps holds one step per entry matched, up to and including the
	// first entry that matched nothing.
	Steps []Step
	// Rule is what Match returns.
	Rule *Rule
	// Reason says why Rule is nil; it is empty when Rule is not.
	Reason string
}

// maxCandidates bounds the alternatives an explanation lists.
const maxCandidates = 10

// Explain resolves entries as Match does and records each step. Its Rule
// is always the one Match returns.
func (d *Domain) Explain(entries []Entry) Explanation {
	if d == nil {
		return Explanation{Reason: "the domain is not configured"}
	}
	x := Explanation{Domain: d.name, File: d.file}
	if len(entries) == 0 {
		x.Reason = "the descriptor has no entries"
		return x
	}
	lv := d.root
	var n *node
	for i, e := range entries {
		if lv == nil {
			x.Steps = append(x.Steps, Step{Entry: e})
			if n == nil {
				x.Reason = "the domain has no descriptors"
			} else {
				x.Reason = fmt.Sprintf("entry %d (%s) goes deeper than the configuration: %s has no nested descriptors",
					i+1, entryString(e), n.path)
			}
			return x
		}
		h := lv.lookup(&e)
		m := h.node
		if m == nil {
			x.Steps = append(x.Steps, Step{Entry: e})
			where := "at the top level"
			if n != nil {
				where = "under " + n.path
			}
			x.Reason = fmt.Sprintf("entry %d (%s) matches no descriptor %s; %s", i+1, entryString(e), where, lv.candidates(e.Key))
			return x
		}
		s := Step{Entry: e, Kind: h.kind, Path: m.path, Line: h.line, Pattern: h.pattern}
		if m.list != nil {
			s.File = m.list.file
		}
		x.Steps = append(x.Steps, s)
		n, lv = m, m.children
	}
	x.Rule = n.rule
	if x.Rule == nil {
		if n.children != nil {
			x.Reason = n.path + " has no rate_limit, rate_limits or action of its own: it only groups nested descriptors, so a descriptor must continue to one of them"
		} else {
			x.Reason = n.path + " has no rate_limit, rate_limits or action, so descriptors that end here are not limited"
		}
	}
	return x
}

// candidates describes what a level offers for key, for a failed match.
func (lv *level) candidates(key string) string {
	var list []string
	var what string
	if g := lv.groups[key]; g != nil {
		var lists []*node // values files, in the order of their first value
		for v, r := range g.exact {
			if r.node.list == nil {
				list = append(list, key+"="+v)
			} else if !slices.Contains(lists, r.node) {
				lists = append(lists, r.node)
			}
		}
		slices.Sort(list)
		for _, w := range g.wild {
			if w.node.list == nil {
				list = append(list, key+"="+w.value+" (wildcard)")
			} else if !slices.Contains(lists, w.node) {
				lists = append(lists, w.node)
			}
		}
		slices.SortFunc(lists, func(a, b *node) int { return strings.Compare(a.path, b.path) })
		for _, n := range lists {
			list = append(list, fmt.Sprintf("%s (%s)", n.path, n.list.summary()))
		}
		what = fmt.Sprintf("descriptors of key %q there", key)
	} else {
		for k := range lv.groups {
			list = append(list, k)
		}
		slices.Sort(list)
		what = "keys there"
	}
	more := ""
	if len(list) > maxCandidates {
		more = fmt.Sprintf(" and %d more", len(list)-maxCandidates)
		list = list[:maxCandidates]
	}
	return fmt.Sprintf("%s: %s%s", what, strings.Join(list, ", "), more)
}

func entryString(e Entry) string { return e.Key + "=" + e.Value }

// String prints x readably, one line per step, then the rule and its
// limits or the reason there is none.
func (x Explanation) String() string {
	var b strings.Builder
	if x.Domain == "" {
		fmt.Fprintf(&b, "no rule: %s\n", x.Reason)
		return b.String()
	}
	fmt.Fprintf(&b, "domain %s (%s)\n", x.Domain, x.File)
	for i, s := range x.Steps {
		fmt.Fprintf(&b, "  %d. %s: ", i+1, entryString(s.Entry))
		switch s.Kind {
		case NoMatch:
			b.WriteString("no match\n")
			continue
		case WildcardMatch:
			fmt.Fprintf(&b, "wildcard %q", s.Pattern)
		default:
			b.WriteString(s.Kind.String())
		}
		if s.File != "" {
			fmt.Fprintf(&b, " -> %s (%s line %d)\n", s.Path, s.File, s.Line)
		} else {
			fmt.Fprintf(&b, " -> %s (line %d)\n", s.Path, s.Line)
		}
	}
	if x.Rule == nil {
		fmt.Fprintf(&b, "no rule: %s\n", x.Reason)
		return b.String()
	}
	fmt.Fprintf(&b, "rule %s: ", x.Rule.Path)
	writeRule(&b, x.Rule, "  ")
	return b.String()
}
