package descriptor

import (
	"slices"
	"strings"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// Tree is an immutable, validated set of domains. It is safe for
// concurrent use; a reload builds a new Tree and swaps it in whole.
type Tree struct {
	domains map[string]*Domain
	names   []string // sorted
	hash    string
	// valuesFiles are the files values_file named, sorted, as Error.File
	// names them.
	valuesFiles []string
}

// Domain is one domain of a Tree: the descriptors of one configuration file.
type Domain struct {
	name     string
	file     string
	line     int // of the domain field
	shardBy  string
	defaults defaults
	root     *level
	nodes    []*node // every node, depth first in configuration order
}

// defaults are a domain's defaults block, as written.
type defaults struct {
	algorithm   string // "" if unset
	failureMode string // "" if unset
	charge      string // "" if unset
	precision   string // "" if unset
	burst       uint32
	hasBurst    bool
	penalty     *algorithm.Penalty // nil if unset or none
}

// level holds the sibling descriptors under one node (or the domain).
type level struct {
	groups map[string]*group // by key
}

// group holds the siblings of one key, in the order Match tries them.
// The values of a values file join the exact values and the patterns of
// the group, each pointing at the file's one node.
type group struct {
	exact map[string]exactRef // by value
	wild  []wildRef           // patterns, in configuration order
	deflt *node               // the key-only node, or nil
}

// exactRef is an exact value of a group: the node it leads to and the
// line that defines it, in the node's values file if it has one.
type exactRef struct {
	node *node
	line int
}

// wildRef is a pattern of a group, like exactRef.
type wildRef struct {
	pattern glob
	value   string
	node    *node
	line    int
}

// hit is what lookup found for an entry.
type hit struct {
	node *node
	kind MatchKind
	// line is where the matched value is defined: in node's values file
	// when it has one, else in the domain's file.
	line int
	// pattern is the matched pattern of a WildcardMatch.
	pattern string
}

// node is one descriptor of the configuration.
type node struct {
	key      string
	value    string // "" for a key-only default and a values file
	wildcard bool
	// list describes the values file the node takes its values from, or
	// is nil for a node with one value (or none).
	list *valuesList
	path string
	// quotedPath is path with every key and value quoted where needed, so
	// that key "a=b" and key "a" with value "b" print differently.
	quotedPath string
	line       int
	depth      int      // 1 for a top-level descriptor
	parent     *node    // nil for a top-level descriptor
	shared     []string // Rule.Shared of this node
	rule       *Rule    // nil if the node has no rate limit or action
	children   *level
}

// Domains returns the names of t's domains in sorted order.
func (t *Tree) Domains() []string {
	if t == nil {
		return nil
	}
	return slices.Clone(t.names)
}

// Domain returns the named domain, or nil if t has none of that name.
func (t *Tree) Domain(name string) *Domain {
	if t == nil {
		return nil
	}
	return t.domains[name]
}

// Hash returns the hex SHA-256 of a canonical form of t: equal for trees
// that behave the same, whatever their rule files' names, order, comments
// or formatting. A values file counts by its name and the set of its
// values, so an edit of one changes the hash and reordering its lines
// does not.
func (t *Tree) Hash() string {
	if t == nil {
		return ""
	}
	return t.hash
}

// ValuesFiles returns the files that values_file fields named and the
// load read, in sorted order, named as Error.File names them: joined with
// the directory for Load, relative to the FS for LoadFS. A watcher
// reloads when one of them changes.
func (t *Tree) ValuesFiles() []string {
	if t == nil {
		return nil
	}
	return slices.Clone(t.valuesFiles)
}

// Cached reports whether any limit of t has precision cached. It walks
// every rule, so it is for start-up and reloads, not for requests.
func (t *Tree) Cached() bool {
	if t == nil {
		return false
	}
	for _, d := range t.domains {
		for _, n := range d.nodes {
			if n.rule == nil {
				continue
			}
			for _, l := range n.rule.Limits {
				if l.Precision == PrecisionCached {
					return true
				}
			}
		}
	}
	return false
}

// Name returns d's domain name.
func (d *Domain) Name() string {
	if d == nil {
		return ""
	}
	return d.name
}

// File returns the file d was loaded from.
func (d *Domain) File() string {
	if d == nil {
		return ""
	}
	return d.file
}

// ShardBy returns the entry key whose value forms the Redis hash tag, or ""
// when the domain leaves it to each descriptor's first entry.
func (d *Domain) ShardBy() string {
	if d == nil {
		return ""
	}
	return d.shardBy
}

// Rule returns the rule at path (Rule.Path), or nil if d has none there.
// It scans the domain's nodes, so it is not for requests.
func (d *Domain) Rule(path string) *Rule {
	for _, n := range d.nodes {
		if n.path == path && n.rule != nil {
			return n.rule
		}
	}
	return nil
}

// Match returns the rule the entries resolve to, or nil if there is none.
// See the package documentation for the precedence. Match does not
// allocate.
func (d *Domain) Match(entries []Entry) *Rule {
	if n := d.walk(entries); n != nil {
		return n.rule
	}
	return nil
}

// walk returns the node entries resolve to, matched entry by entry with
// lookup, or nil if there is none.
func (d *Domain) walk(entries []Entry) *node {
	if d == nil || len(entries) == 0 {
		return nil
	}
	lv := d.root
	var n *node
	for i := range entries {
		if lv == nil {
			return nil
		}
		h := lv.lookup(&entries[i])
		if h.node == nil {
			return nil
		}
		n, lv = h.node, h.node.children
	}
	return n
}

// lookup returns the child matching e and how it matched; its node is nil
// when none does. The exact values of every values file are in one map,
// so their number does not change the cost.
func (lv *level) lookup(e *Entry) hit {
	g := lv.groups[e.Key]
	if g == nil {
		return hit{}
	}
	if r, ok := g.exact[e.Value]; ok {
		return hit{node: r.node, kind: ExactMatch, line: r.line}
	}
	for i := range g.wild {
		if w := &g.wild[i]; w.pattern.match(e.Value) {
			return hit{node: w.node, kind: WildcardMatch, line: w.line, pattern: w.value}
		}
	}
	if g.deflt != nil {
		return hit{node: g.deflt, kind: DefaultMatch, line: g.deflt.line}
	}
	return hit{}
}

// glob is a compiled wildcard value: "*" matches any run of bytes,
// including none; every other byte matches itself.
type glob struct {
	prefix string
	suffix string
	middle []string // non-empty literal parts between the first and last "*"
}

// compileGlob compiles p, which contains at least one "*".
func compileGlob(p string) glob {
	first := strings.IndexByte(p, '*')
	last := strings.LastIndexByte(p, '*')
	g := glob{prefix: p[:first], suffix: p[last+1:]}
	for part := range strings.SplitSeq(p[first+1:max(last, first+1)], "*") {
		if part != "" {
			g.middle = append(g.middle, part)
		}
	}
	return g
}

// match reports whether s matches g. Taking each middle part at its
// leftmost place is correct because "*" is the only wildcard.
func (g *glob) match(s string) bool {
	if len(s) < len(g.prefix)+len(g.suffix) ||
		!strings.HasPrefix(s, g.prefix) || !strings.HasSuffix(s, g.suffix) {
		return false
	}
	s = s[len(g.prefix) : len(s)-len(g.suffix)]
	for _, m := range g.middle {
		i := strings.Index(s, m)
		if i < 0 {
			return false
		}
		s = s[i+len(m):]
	}
	return true
}

// Counts reports whether a descriptor that begins with prefix can resolve
// to a rule with limits: whether the node prefix resolves to (matched
// entry by entry as Match does) or a node below it has a rule with limits.
// Overrides are validated with it; it walks the tree, so it is not for
// requests.
func (d *Domain) Counts(prefix []Entry) bool {
	counts := false
	d.EachCounted(prefix, func(*Rule) bool {
		counts = true
		return false
	})
	return counts
}

// EachCounted calls fn with every rule with limits at the node prefix
// resolves to or below it, until fn returns false: the rules an override
// of prefix covers.
func (d *Domain) EachCounted(prefix []Entry, fn func(*Rule) bool) {
	if n := d.walk(prefix); n != nil {
		n.eachCounted(fn)
	}
}

// eachCounted is EachCounted from n, and reports whether fn asked for
// more.
func (n *node) eachCounted(fn func(*Rule) bool) bool {
	if n.rule != nil && len(n.rule.Limits) > 0 && !fn(n.rule) {
		return false
	}
	if n.children == nil {
		return true
	}
	for _, g := range n.children.groups {
		for _, c := range g.exact {
			if !c.node.eachCounted(fn) {
				return false
			}
		}
		for _, c := range g.wild {
			if !c.node.eachCounted(fn) {
				return false
			}
		}
		if g.deflt != nil && !g.deflt.eachCounted(fn) {
			return false
		}
	}
	return true
}
