package descriptor

// This file is a strict reader of YAML nodes (gopkg.in/yaml.v3), apart from
// what the nodes mean. It reads a mapping into its fields, following
// aliases and merge keys, and marks unknown and duplicate fields; it
// decodes strings, booleans and whole numbers without reflection; and it
// records every problem as an *Error with the file, the line of the
// offending node and a descriptor path the caller passes in. A budget of
// nodes (aliases count each time they are used) and a limit on the errors
// per file bound the work that one file can cause. tollgate's schema, what
// the fields are and how they combine, is in parse.go and ratelimit.go.

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Limits on what the reader visits in one file.
const (
	// maxMergeDepth bounds the nesting of merge keys.
	maxMergeDepth = 64
	// maxYAMLNodes bounds the YAML nodes visited per file, counting each
	// use of an alias again, so that an alias bomb fails instead of
	// exhausting memory.
	maxYAMLNodes = 1 << 20
	// maxErrors bounds the errors reported per file.
	maxErrors = 100
)

// fieldSet is a space-separated list of field names.
type fieldSet string

// has reports whether name is one of s's names.
func (s fieldSet) has(name string) bool {
	set := string(s)
	for i := 0; name != "" && i < len(set); {
		j := strings.Index(set[i:], name)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(name)
		if (j == 0 || set[j-1] == ' ') && (end == len(set) || set[end] == ' ') {
			return true
		}
		i = j + 1
	}
	return false
}

// String lists s's names separated by commas, for messages.
func (s fieldSet) String() string { return strings.Join(strings.Fields(string(s)), ", ") }

// field is one key/value pair of a YAML mapping, merge keys resolved.
type field struct {
	name    string
	key     *yaml.Node
	val     *yaml.Node // aliases resolved
	problem string     // set for an unknown or duplicate field
}

// fields is a decoded mapping.
type fields []field

// get returns the first field called name that is neither unknown nor a
// duplicate, or nil if there is none.
func (fs fields) get(name string) *field {
	for i := range fs {
		if fs[i].name == name && fs[i].problem == "" {
			return &fs[i]
		}
	}
	return nil
}

// yamlReader reads the nodes of one file and records its problems.
type yamlReader struct {
	file   string
	errs   *errorList
	budget int // YAML nodes left to visit
	nerrs  int // errors reported
	// exhausted is set once the budget or the error limit is reached;
	// decoding then stops.
	exhausted bool
}

// newYAMLReader returns a reader that records the problems of file in errs.
func newYAMLReader(file string, errs *errorList) yamlReader {
	return yamlReader{file: file, errs: errs, budget: maxYAMLNodes}
}

// errorf records a problem at n's line (0 for a nil n) under path.
func (r *yamlReader) errorf(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	r.errorAt(line, path, format, args...)
}

// errorAt records a problem at line under path, or once the error limit is
// reached, that decoding stops.
func (r *yamlReader) errorAt(line int, path, format string, args ...any) {
	if r.exhausted {
		return
	}
	r.nerrs++
	if r.nerrs > maxErrors {
		r.exhausted = true
		r.errs.add(r.file, line, "", "too many errors; stopping")
		return
	}
	r.errs.add(r.file, line, path, format, args...)
}

// errorIn records a problem in another file than r's, such as a values
// file, under the same error limit.
func (r *yamlReader) errorIn(file string, line int, path, format string, args ...any) {
	own := r.file
	r.file = file
	r.errorAt(line, path, format, args...)
	r.file = own
}

// resolve follows aliases and charges the node budget. It returns nil once
// the budget is spent or decoding has stopped.
func (r *yamlReader) resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	r.budget--
	if r.budget < 0 && !r.exhausted {
		r.errorf(n, "", "the file expands to more than %d YAML nodes (aliases count each time they are used)", maxYAMLNodes)
		r.exhausted = true
	}
	if r.exhausted {
		return nil
	}
	return n
}

// decodeYAML reads the next document. It turns a panic of the YAML parser
// into an error, so that no input can crash a reload.
func decodeYAML(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: parser failed: %v", r)
		}
	}()
	return dec.Decode(n)
}

// syntaxError records a YAML parser error, taking the line from its text.
func (r *yamlReader) syntaxError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				line, msg = n, tail
			}
		}
	}
	r.errs.add(r.file, line, "", "invalid YAML: %s", msg)
}

// fields decodes the mapping n. Structural problems are reported at once
// with path; unknown and duplicate fields are marked, for report to record
// once the caller knows the descriptor's path. It returns nil if n is not a
// mapping.
func (r *yamlReader) fields(n *yaml.Node, path, what string, allowed fieldSet) fields {
	out := make(fields, 0, len(n.Content)/2)
	if !r.collect(n, path, what, allowed, &out, false, 0) {
		return nil
	}
	return out
}

// collect appends the fields of the mapping n to out, then those of its
// merge keys, which do not override a field already present (merged is
// set for them).
func (r *yamlReader) collect(n *yaml.Node, path, what string, allowed fieldSet, out *fields, merged bool, depth int) bool {
	n = r.resolve(n)
	if n == nil {
		return false
	}
	if n.Kind != yaml.MappingNode {
		r.errorf(n, path, "%s: want a mapping, got %s", what, describe(n))
		return false
	}
	if depth > maxMergeDepth {
		r.errorf(n, path, "%s: merge keys nested more than %d deep", what, maxMergeDepth)
		return false
	}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := r.resolve(n.Content[i])
		v := r.resolve(n.Content[i+1])
		if k == nil || v == nil {
			return false
		}
		if k.Kind != yaml.ScalarNode {
			r.errorf(k, path, "%s: a field name must be a plain string, got %s", what, describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		f := field{name: k.Value, key: k, val: v}
		if prev := out.get(f.name); prev != nil {
			if merged {
				continue // a key of the mapping itself, or of an earlier merge, wins
			}
			f.problem = fmt.Sprintf("duplicate field %q (first at line %d)", f.name, prev.key.Line)
		} else if !allowed.has(f.name) {
			f.problem = fmt.Sprintf("unknown field %q in %s (want one of: %s)", f.name, what, allowed)
		}
		*out = append(*out, f)
	}
	for _, m := range merges {
		if m.Kind == yaml.SequenceNode {
			for _, item := range m.Content {
				if !r.collect(item, path, what, allowed, out, true, depth+1) {
					return false
				}
			}
			continue
		}
		if !r.collect(m, path, what, allowed, out, true, depth+1) {
			return false
		}
	}
	return true
}

// report records the unknown and duplicate fields of fs under path.
func (r *yamlReader) report(fs fields, path string) {
	for _, f := range fs {
		if f.problem != "" {
			r.errorf(f.key, path, "%s", f.problem)
		}
	}
}

// describe names the kind of a YAML node for an error message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "null"
		}
		return strconv.Quote(n.Value)
	}
	return "a YAML document"
}

// fieldName names f in messages: "rate_limit.unit" for the field unit of
// the mapping that ctx names, or just "unit" when ctx is empty.
func fieldName(ctx string, f *field) string {
	if ctx == "" {
		return f.name
	}
	return ctx + "." + f.name
}

// The field decoders below take f, which may be nil for an absent field,
// the descriptor path to report problems under, and ctx, which names the
// mapping that holds f in messages (see fieldName).

// str decodes a string field. Any scalar is accepted and taken as written,
// so "value: 200" is the string "200"; null reads as unset.
func (r *yamlReader) str(f *field, path, ctx string) (string, bool) {
	if f == nil {
		return "", false
	}
	if f.val.Kind != yaml.ScalarNode {
		r.errorf(f.val, path, "%s: want a string, got %s", fieldName(ctx, f), describe(f.val))
		return "", false
	}
	if f.val.ShortTag() == "!!null" {
		return "", false
	}
	return f.val.Value, true
}

// boolean decodes a true/false field; YAML 1.1 spellings such as "yes" are
// accepted, as envoyproxy/ratelimit's YAML library does.
func (r *yamlReader) boolean(f *field, path, ctx string) bool {
	if f == nil {
		return false
	}
	if f.val.Kind == yaml.ScalarNode && (f.val.Value == "true" || f.val.Value == "false") && f.val.ShortTag() == "!!bool" {
		return f.val.Value == "true" // what Decode gives, without reflection
	}
	var b bool
	if f.val.Kind != yaml.ScalarNode || f.val.Decode(&b) != nil {
		r.errorf(f.val, path, "%s: want true or false, got %s", fieldName(ctx, f), describe(f.val))
		return false
	}
	return b
}

// uint32Field decodes a whole number between 0 and MaxUint32.
func (r *yamlReader) uint32Field(f *field, path, ctx string) (uint32, bool) {
	ok := f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!int"
	var v int64
	if ok {
		v, ok = decodeInt(f.val)
	}
	if !ok || v < 0 || v > math.MaxUint32 {
		r.errorf(f.val, path, "%s: want a whole number from 0 to %d, got %s", fieldName(ctx, f), uint32(math.MaxUint32), describe(f.val))
		return 0, false
	}
	return uint32(v), true
}

// decodeInt decodes an !!int scalar, plain decimals without reflection.
func decodeInt(n *yaml.Node) (int64, bool) {
	if i, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
		return i, true
	}
	var v int64
	return v, n.Decode(&v) == nil
}
