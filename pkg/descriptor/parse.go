package descriptor

// This file parses one rule file into a Domain with the strict reader of
// yamlreader.go: the file's domain, its defaults and shard_by, and the
// descriptors with their keys, values, actions and failure modes (their
// rate_limit and rate_limits are decoded in ratelimit.go). It checks what
// involves more than one descriptor: duplicate siblings, replaces that
// name no limit of the domain, a shard_by key that no descriptor has.

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// Limits on what one configuration file may hold.
const (
	// maxDepth bounds the nesting of descriptors.
	maxDepth = 64
	// maxWindow is the longest window the algorithms support.
	maxWindow = time.Duration(algorithm.MaxPeriod) * time.Microsecond
)

// The fields of each YAML mapping. The first group of descriptor and
// rate_limit fields is envoyproxy/ratelimit's; the rest are tollgate's.
const (
	fileFields       fieldSet = "domain descriptors defaults shard_by"
	defaultsFields   fieldSet = "algorithm failure_mode burst charge precision penalty"
	descriptorFields fieldSet = "key value rate_limit descriptors shadow_mode quota_mode detailed_metric value_to_metric share_threshold metadata " +
		"rate_limits action failure_mode values_file"
	limitFields    fieldSet = "unit requests_per_unit unlimited name replaces algorithm burst unit_multiplier charge precision penalty"
	replacesFields fieldSet = "name"
)

// parser decodes and validates one file.
type parser struct {
	yamlReader
	opts   Options
	values *valuesReader // shared by the parsers of one load
}

// newParser returns a parser of file that records its problems in errs
// and reads values files through values.
func newParser(file string, opts Options, values *valuesReader, errs *errorList) *parser {
	return &parser{yamlReader: newYAMLReader(file, errs), opts: opts, values: values}
}

// parseFile decodes one file into a domain. It returns nil if the file
// names no usable domain; problems are recorded in p.errs.
func (p *parser) parseFile(data []byte) *Domain {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := decodeYAML(dec, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(nil, "", "missing domain: the file is empty")
		} else {
			p.syntaxError(err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := decodeYAML(dec, &extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		p.syntaxError(err)
		return nil
	default:
		p.errorf(&extra, "", "a second YAML document: a file holds exactly one domain")
		return nil
	}
	root := &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		p.errorf(root, "", "missing domain: the file is empty")
		return nil
	}
	return p.domain(root)
}

// domainBuilder holds what the descriptors of one domain share.
type domainBuilder struct {
	*parser
	d           *Domain
	algorithm   algorithm.Kind   // resolved default algorithm
	algSource   string           // where algorithm came from, for messages
	charge      algorithm.Charge // resolved default charge
	precision   Precision        // resolved default precision
	failureMode FailureMode
	burst       uint32
	hasBurst    bool
	// defaultPenalty is the defaults' penalty, nil for none.
	defaultPenalty *algorithm.Penalty
	names          map[string]bool // limit names
	keys           map[string]bool // every descriptor key
	refs           []replaceRef
	noShared       []string // maxDepth times ""
	// listData holds the content of each list node's values file until
	// the node's level takes its values.
	listData map[*node]string
}

// replaceRef is one replaces entry, checked once every name is known.
type replaceRef struct {
	name string
	node *yaml.Node
	path string
	ctx  string
}

// domain decodes the root mapping of a file.
func (p *parser) domain(root *yaml.Node) *Domain {
	fs := p.fields(root, "", "the file", fileFields)
	if fs == nil {
		return nil
	}
	p.report(fs, "")
	d := &Domain{file: p.file, line: root.Line}
	b := &domainBuilder{parser: p, d: d, names: map[string]bool{}, keys: map[string]bool{}, noShared: make([]string, maxDepth),
		listData: map[*node]string{}}

	nameF := fs.get("domain")
	name, ok := p.str(nameF, "", "")
	switch {
	case nameF == nil:
		p.errorf(root, "", "missing domain")
	case !ok || name == "":
		p.errorf(nameF.val, "", "domain is empty")
	default:
		d.name, d.line = name, nameF.key.Line
	}

	b.defaults(fs.get("defaults"))
	if f := fs.get("descriptors"); f != nil {
		d.root = b.level(f.val, nil, "", 1)
	}
	if f := fs.get("shard_by"); f != nil {
		key, ok := p.str(f, "", "")
		switch {
		case !ok || key == "":
			p.errorf(f.val, "", "shard_by is empty")
		case !b.keys[key]:
			p.errorf(f.val, "", "shard_by: no descriptor of the domain has key %q", key)
		default:
			d.shardBy = key
		}
	}
	for _, r := range b.refs {
		if !b.names[r.name] {
			p.errorf(r.node, r.path, "%s: replaces %q, but no limit of the domain has that name", r.ctx, r.name)
		}
	}
	if d.name == "" {
		return nil
	}
	return d
}

// defaults decodes the domain's defaults and resolves the domain's
// default algorithm, failure mode, charge and precision.
func (b *domainBuilder) defaults(f *field) {
	b.algorithm, b.algSource = algorithm.TokenBucket, "tollgate's default"
	if b.opts.DefaultAlgorithm != 0 {
		b.algorithm, b.algSource = b.opts.DefaultAlgorithm, "the service's default"
	}
	b.charge = b.opts.DefaultCharge
	b.precision = b.opts.DefaultPrecision
	b.failureMode = b.opts.DefaultFailureMode
	if f == nil || (f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!null") {
		return
	}
	fs := b.fields(f.val, "", "defaults", defaultsFields)
	b.report(fs, "")
	if s, ok := b.str(fs.get("algorithm"), "", "defaults"); ok {
		if k, err := algorithm.ParseKind(s); err != nil {
			b.errorf(fs.get("algorithm").val, "", "defaults.algorithm: %v", err)
		} else {
			b.algorithm, b.algSource = k, "the domain's defaults"
			b.d.defaults.algorithm = k.String()
		}
	}
	if s, ok := b.str(fs.get("failure_mode"), "", "defaults"); ok {
		if m, err := ParseFailureMode(s); err != nil {
			b.errorf(fs.get("failure_mode").val, "", "defaults.failure_mode: %v", err)
		} else {
			b.failureMode = m
			b.d.defaults.failureMode = m.String()
		}
	}
	if s, ok := b.str(fs.get("charge"), "", "defaults"); ok {
		if c, err := algorithm.ParseCharge(s); err != nil {
			b.errorf(fs.get("charge").val, "", "defaults.charge: %v", err)
		} else {
			b.charge = c
			b.d.defaults.charge = c.String()
		}
	}
	if s, ok := b.str(fs.get("precision"), "", "defaults"); ok {
		if p, err := ParsePrecision(s); err != nil {
			b.errorf(fs.get("precision").val, "", "defaults.precision: %v", err)
		} else {
			b.precision = p
			b.d.defaults.precision = p.String()
		}
	}
	if bf := fs.get("burst"); bf != nil {
		if v, ok := b.uint32Field(bf, "", "defaults"); ok {
			b.burst, b.hasBurst = v, true
			b.d.defaults.burst, b.d.defaults.hasBurst = v, true
		}
	}
	if pf := fs.get("penalty"); pf != nil {
		if p, ok := b.penalty(pf, "", "defaults"); ok {
			b.defaultPenalty, b.d.defaults.penalty = p, p
		}
	}
}

// level decodes a descriptors list into the children of parent (nil for
// the domain's top level).
func (b *domainBuilder) level(seqNode *yaml.Node, parent *node, parentPath string, depth int) *level {
	seq := b.resolve(seqNode)
	if seq == nil || (seq.Kind == yaml.ScalarNode && seq.ShortTag() == "!!null") {
		return nil
	}
	if seq.Kind != yaml.SequenceNode {
		b.errorf(seq, parentPath, "descriptors: want a list, got %s", describe(seq))
		return nil
	}
	if depth > maxDepth {
		b.errorf(seq, parentPath, "descriptors are nested more than %d levels deep", maxDepth)
		return nil
	}
	lv := &level{groups: map[string]*group{}}
	seen := map[sibling]int{}
	for i, item := range seq.Content {
		n := b.descriptor(item, parent, parentPath, i, depth)
		if b.exhausted {
			return nil
		}
		if n == nil {
			continue
		}
		id := sibling{key: n.key, value: n.value}
		if n.list != nil {
			id.list = n.list.name
		}
		if first, dup := seen[id]; dup {
			b.errorAt(n.line, n.path, "duplicate descriptor (first at line %d)", first)
			continue
		}
		seen[id] = n.line
		g := lv.groups[n.key]
		if g == nil {
			g = &group{}
			lv.groups[n.key] = g
		}
		switch {
		case n.list != nil:
			if data, ok := b.listData[n]; ok {
				delete(b.listData, n)
				b.addValues(g, n, data)
			}
		case n.wildcard:
			// An equal pattern here comes from a values file; seen has
			// those of the domain's file.
			if j := slices.IndexFunc(g.wild, func(w wildRef) bool { return w.value == n.value }); j >= 0 {
				w := g.wild[j]
				b.errorAt(n.line, n.path, "duplicate descriptor (first at %s)", location{b.refFile(w.node), w.line}.where(b.file))
				continue
			}
			if len(g.wild) == b.opts.maxPatterns() {
				b.errorAt(n.line, n.path, "more than %d wildcard values of key %q at one level: a request tries them in turn (Options.MaxPatterns)", len(g.wild), n.key)
				continue
			}
			g.wild = append(g.wild, wildRef{pattern: compileGlob(n.value), value: n.value, node: n, line: n.line})
		case n.value == "":
			g.deflt = n
		default:
			if r, dup := g.exact[n.value]; dup {
				b.errorAt(n.line, n.path, "duplicate descriptor (first at %s)", location{b.refFile(r.node), r.line}.where(b.file))
				continue
			}
			if g.exact == nil {
				g.exact = map[string]exactRef{}
			}
			g.exact[n.value] = exactRef{node: n, line: n.line}
		}
	}
	if len(lv.groups) == 0 {
		return nil
	}
	return lv
}

// sibling identifies a descriptor among its siblings: by key and value,
// or by key and values file.
type sibling struct {
	key, value, list string
}

// descriptor decodes one descriptor and, recursively, its children. It
// returns nil if the descriptor has no usable key.
func (b *domainBuilder) descriptor(item *yaml.Node, parent *node, parentPath string, idx, depth int) *node {
	// A descriptor without a usable key is named by its position.
	at := joinPath(parentPath, "descriptors["+strconv.Itoa(idx)+"]")
	resolved := b.resolve(item)
	if resolved == nil {
		return nil
	}
	if resolved.Kind != yaml.MappingNode {
		b.errorf(resolved, at, "descriptor: want a mapping, got %s", describe(resolved))
		return nil
	}
	fs := b.fields(resolved, at, "descriptor", descriptorFields)
	if fs == nil {
		return nil
	}
	keyF := fs.get("key")
	key := ""
	if keyF != nil && keyF.val.Kind == yaml.ScalarNode && keyF.val.ShortTag() != "!!null" {
		key = keyF.val.Value
	}
	if key == "" {
		b.report(fs, at)
		switch {
		case keyF == nil:
			b.errorf(resolved, at, "missing key")
		case keyF.val.Kind == yaml.ScalarNode:
			b.errorf(keyF.val, at, "key is empty")
		default:
			b.errorf(keyF.val, at, "key: want a string, got %s", describe(keyF.val))
		}
		return nil
	}
	value, _ := b.str(fs.get("value"), joinPath(parentPath, key), "")
	valuesF := fs.get("values_file")
	listName := ""
	if valuesF != nil {
		listName, _ = b.str(valuesF, joinPath(parentPath, key), "")
	}
	parentQuoted := ""
	if parent != nil {
		parentQuoted = parent.quotedPath
	}
	var path, quotedPath string
	if listName != "" {
		path = joinPath(parentPath, key+" in "+listName)
		quotedPath = joinPath(parentQuoted, quote(key)+" in "+quote(listName))
	} else {
		path = segmentPath(parentPath, key, value)
		qkey, qvalue := quote(key), value
		if value != "" {
			qvalue = quote(value)
		}
		if qkey == key && qvalue == value && parentQuoted == parentPath {
			quotedPath = path // nothing needs quoting
		} else {
			quotedPath = segmentPath(parentQuoted, qkey, qvalue)
		}
	}
	b.report(fs, path)

	n := &node{key: key, value: value, path: path, quotedPath: quotedPath, line: keyF.key.Line, depth: depth, parent: parent}
	n.wildcard = strings.Contains(value, "*")
	if valuesF != nil {
		// The node is a list even when its file is wrong, so that it is
		// not taken for the key's default.
		n.list = &valuesList{name: listName}
		switch {
		case listName == "" && valuesF.val.Kind == yaml.ScalarNode:
			b.errorf(valuesF.val, path, "values_file is empty")
		case listName == "":
			// reported by str
		case value != "":
			b.errorf(valuesF.key, path, "values_file cannot be combined with value: the file holds the descriptor's values")
		default:
			if data, ok := b.valuesFile(valuesF, listName, n); ok {
				b.listData[n] = data
			}
		}
	}
	b.keys[key] = true
	b.d.nodes = append(b.d.nodes, n)

	sharedValue := ""
	if f := fs.get("share_threshold"); b.boolean(f, path, "") {
		if n.wildcard {
			sharedValue = value
		} else {
			b.errorf(f.key, path, "share_threshold needs a wildcard value (one containing \"*\")")
		}
	}
	n.shared = b.shared(parent, depth, sharedValue)

	specs := b.limitSpecs(fs, path)
	actionF := fs.get("action")
	action := ActionLimit
	if s, ok := b.str(actionF, path, ""); ok {
		if a, err := ParseAction(s); err != nil {
			b.errorf(actionF.val, path, "action: %v", err)
		} else {
			action = a
			if f := firstField(fs.get("rate_limit"), fs.get("rate_limits")); f != nil {
				b.errorf(actionF.key, path, "action %s cannot be combined with %s", a, f.name)
			}
		}
	}
	failureF := fs.get("failure_mode")
	failureMode, hasFailureMode := b.failureMode, false
	if s, ok := b.str(failureF, path, ""); ok {
		if m, err := ParseFailureMode(s); err != nil {
			b.errorf(failureF.val, path, "failure_mode: %v", err)
		} else {
			failureMode, hasFailureMode = m, true
		}
	}
	r := &Rule{
		Path:           path,
		Action:         action,
		Shared:         n.shared,
		ShadowMode:     b.boolean(fs.get("shadow_mode"), path, ""),
		QuotaMode:      b.boolean(fs.get("quota_mode"), path, ""),
		DetailedMetric: b.boolean(fs.get("detailed_metric"), path, ""),
		ValueToMetric:  b.boolean(fs.get("value_to_metric"), path, ""),
		FailureMode:    failureMode,
		Metadata:       b.metadata(fs.get("metadata"), path),
	}
	for _, s := range specs {
		if s.unlimited {
			r.Unlimited = true
		} else {
			r.Limits = append(r.Limits, s.limit)
		}
		for _, name := range s.replaces {
			if !slices.Contains(r.Replaces, name) {
				r.Replaces = append(r.Replaces, name)
			}
		}
	}
	if f := fs.get("descriptors"); f != nil {
		n.children = b.level(f.val, n, path, depth+1)
	}

	if fs.get("rate_limit") == nil && fs.get("rate_limits") == nil && actionF == nil {
		if hasFailureMode {
			b.errorf(failureF.key, path, "failure_mode has no effect on a descriptor without rate_limit, rate_limits or action")
		}
		return n
	}
	n.rule = r
	return n
}

// segmentPath returns parent/key=value in one allocation, leaving out
// "parent/" at the top level and "=value" for a key-only descriptor.
func segmentPath(parent, key, value string) string {
	if parent == "" && value == "" {
		return key
	}
	var b strings.Builder
	b.Grow(len(parent) + 1 + len(key) + 1 + len(value))
	if parent != "" {
		b.WriteString(parent)
		b.WriteByte('/')
	}
	b.WriteString(key)
	if value != "" {
		b.WriteByte('=')
		b.WriteString(value)
	}
	return b.String()
}

// shared returns Rule.Shared for a node at depth under parent that shares
// value, or "" for none. Most trees share nothing, and nodes whose slice
// holds only "" share one backing array.
func (b *domainBuilder) shared(parent *node, depth int, value string) []string {
	var inherited []string
	if parent != nil {
		inherited = parent.shared
	}
	if value == "" && !slices.ContainsFunc(inherited, func(s string) bool { return s != "" }) {
		return b.noShared[:depth:depth]
	}
	shared := make([]string, depth)
	copy(shared, inherited)
	shared[depth-1] = value
	return shared
}

// firstField returns the first non-nil field.
func firstField(fs ...*field) *field {
	for _, f := range fs {
		if f != nil {
			return f
		}
	}
	return nil
}

// joinPath appends a segment to a descriptor path.
func joinPath(parent, seg string) string {
	if parent == "" {
		return seg
	}
	return parent + "/" + seg
}
