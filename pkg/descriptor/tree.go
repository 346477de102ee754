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
type group struct {
	exact map[string]*node // by value
	wild  []*node          // wildcard values, in configuration order
	deflt *node            // the key-only node, or nil
}

// node is one descriptor of the configuration.
type node struct {
	key      string
	value    string // "" for a key-only default
	wildcard bool
	pattern  glob
	path     string
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
// that behave the same, whatever their files' names, order, comments or
// formatting.
func (t *Tree) Hash() string {
	if t == nil {
		return ""
	}
	return t.hash
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

// Match returns the rule the entries resolve to, or nil if there is none.
// See the package documentation for the precedence. Match does not
// allocate.
func (d *Domain) Match(entries []Entry) *Rule {
	if d == nil || len(entries) == 0 {
		return nil
	}
	lv := d.root
	var n *node
	for i := range entries {
		if lv == nil {
			return nil
		}
		n, _ = lv.lookup(&entries[i])
		if n == nil {
			return nil
		}
		lv = n.children
	}
	return n.rule
}

// lookup returns the child matching e and how it matched.
func (lv *level) lookup(e *Entry) (*node, MatchKind) {
	g := lv.groups[e.Key]
	if g == nil {
		return nil, NoMatch
	}
	if n := g.exact[e.Value]; n != nil {
		return n, ExactMatch
	}
	for _, n := range g.wild {
		if n.pattern.match(e.Value) {
			return n, WildcardMatch
		}
	}
	if g.deflt != nil {
		return g.deflt, DefaultMatch
	}
	return nil, NoMatch
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
