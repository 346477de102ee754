package descriptor

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// A rule's metadata is any YAML mapping, kept with its types and nesting
// as envoyproxy/ratelimit keeps it, to be returned in the answer's dynamic
// metadata. envoyproxy/ratelimit reads its files as YAML 1.1 (yaml.v2), so
// an unquoted scalar of the metadata is resolved as YAML 1.1 resolves it,
// not as YAML 1.2 does for the rest of the file:
//
//	yes, no, on, off, y, n (any case form)   bool
//	~, null, empty                           null
//	010, 0x10, 0b10, 1_000                   numbers (010 is octal: 8)
//	1e3, 2.5, -7                             numbers
//	2026-01-01                               the string "2026-01-01"
//
// A quoted scalar, or one tagged !!str, is a string. Numbers are doubles,
// as in a protobuf Struct; they must be finite, since no JSON (a /json
// answer, an access log) can carry .inf or .nan. A key of the metadata
// mapping itself is its text; a key of a mapping nested in it is turned
// into a string as envoyproxy/ratelimit turns it: `yes: 1` has the key
// "true" there, `010: 1` the key "8".

// maxMetadataDepth bounds the nesting of a rule's metadata.
const maxMetadataDepth = 32

// metadata returns the metadata field f of the rule at path, or nil.
func (b *domainBuilder) metadata(f *field, path string) map[string]any {
	if f == nil || (f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!null") {
		return nil
	}
	if f.val.Kind != yaml.MappingNode {
		b.errorf(f.val, path, "metadata: want a mapping, got %s", describe(f.val))
		return nil
	}
	m, ok := b.metadataMap(f.val, path, "metadata", 1, false)
	if !ok || len(m) == 0 {
		return nil
	}
	return m
}

// metadataMap converts the mapping n, found at name, or reports why not.
// resolveKeys resolves its keys as scalars before they become strings.
func (b *domainBuilder) metadataMap(n *yaml.Node, path, name string, depth int, resolveKeys bool) (map[string]any, bool) {
	m := make(map[string]any, len(n.Content)/2)
	lines := map[string]int{}
	ok := true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := b.resolve(n.Content[i]), b.resolve(n.Content[i+1])
		if k == nil || v == nil {
			return nil, false
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			b.errorf(k, path, "%s: a key must be a scalar (and not <<, a merge), got %s", name, describe(k))
			ok = false
			continue
		}
		ks := k.Value
		if resolveKeys {
			key, err := resolve11(k)
			if err != nil {
				b.errorf(k, path, "%s: key %q: %v", name, k.Value, err)
				ok = false
				continue
			}
			ks = fmt.Sprint(key)
		}
		if first, dup := lines[ks]; dup {
			b.errorf(k, path, "%s: duplicate key %q (first at line %d)", name, ks, first)
			ok = false
			continue
		}
		lines[ks] = k.Line
		val, vok := b.metadataValue(v, path, name+"."+ks, depth)
		if !vok {
			ok = false
			continue
		}
		m[ks] = val
	}
	return m, ok
}

// metadataValue converts the node n, found at name, or reports why not.
func (b *domainBuilder) metadataValue(n *yaml.Node, path, name string, depth int) (any, bool) {
	if depth > maxMetadataDepth {
		b.errorf(n, path, "%s: nested deeper than %d levels", name, maxMetadataDepth)
		return nil, false
	}
	switch n.Kind {
	case yaml.MappingNode:
		return b.metadataMap(n, path, name, depth+1, true)
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		ok := true
		for i, item := range n.Content {
			if item = b.resolve(item); item == nil {
				return nil, false
			}
			v, vok := b.metadataValue(item, path, fmt.Sprintf("%s[%d]", name, i), depth+1)
			ok = ok && vok
			list = append(list, v)
		}
		return list, ok
	case yaml.ScalarNode:
		v, err := resolve11(n)
		if err == nil {
			v, err = jsonNumber(v)
		}
		if err != nil {
			b.errorf(n, path, "%s: %q: %v", name, n.Value, err)
			return nil, false
		}
		return v, true
	}
	b.errorf(n, path, "%s: want a scalar, a list or a mapping, got %s", name, describe(n))
	return nil, false
}

// jsonNumber turns the integers of resolve11 into float64, as a Struct
// holds them, and refuses what JSON cannot carry.
func jsonNumber(v any) (any, error) {
	switch n := v.(type) {
	case int64:
		return float64(n), nil
	case uint64:
		return float64(n), nil
	case float64:
		if math.IsInf(n, 0) || math.IsNaN(n) {
			return nil, errors.New("a number must be finite (JSON cannot carry it)")
		}
	}
	return v, nil
}

// yaml11Float is YAML 1.1's form of a float without a special value.
var yaml11Float = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// resolve11 returns the value of the scalar n as YAML 1.1 resolves it: a
// string, bool, nil, int64, uint64 or float64.
func resolve11(n *yaml.Node) (any, error) {
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return n.Value, nil
	}
	if n.Style&yaml.TaggedStyle != 0 {
		switch n.ShortTag() {
		case "!!str":
			return n.Value, nil
		case "!!int", "!!float", "!!bool", "!!null":
		default:
			return nil, errors.New("its tag is not supported")
		}
	}
	s := n.Value
	switch s {
	case "y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "true", "True", "TRUE":
		return true, nil
	case "n", "N", "no", "No", "NO", "off", "Off", "OFF", "false", "False", "FALSE":
		return false, nil
	case "", "~", "null", "Null", "NULL":
		return nil, nil
	case ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF":
		return math.Inf(1), nil
	case "-.inf", "-.Inf", "-.INF":
		return math.Inf(-1), nil
	case ".nan", ".NaN", ".NAN":
		return math.NaN(), nil
	}
	plain := strings.ReplaceAll(s, "_", "")
	if i, err := strconv.ParseInt(plain, 0, 64); err == nil {
		return i, nil
	}
	if u, err := strconv.ParseUint(plain, 0, 64); err == nil {
		return u, nil
	}
	if yaml11Float.MatchString(plain) {
		if f, err := strconv.ParseFloat(plain, 64); err == nil {
			return f, nil
		}
	}
	return s, nil
}
