package descriptor

// This file reads values files: a descriptor with values_file takes its
// values from a file of the configuration directory, one exact value or
// "*" pattern per line, as if it were one descriptor per value sharing the
// node's rule and children. The values join the exact values and the
// patterns of their key's group at the node's place among its siblings,
// so a long list costs one map look-up per request, and each pattern
// counts against Options.MaxPatterns.

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/bits"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxValuesFileSize bounds a values file, so that a wrong name (a log, a
// database) fails clearly instead of filling memory.
const maxValuesFileSize = 128 << 20

// valuesList describes the content of one values_file.
type valuesList struct {
	name     string // as written, cleaned: slash-separated, relative to the directory
	file     string // as Error.File names it
	exact    int    // exact values
	patterns int
	// digest is a digest of the set of values (digestSet), so that an
	// edit changes the tree's hash and reordering or comments do not.
	digest string
}

// summary describes l for the dump and explanations, such as "20000
// values, 2 patterns, digest 5e1f0c2a9b7d3e48".
func (l *valuesList) summary() string {
	return fmt.Sprintf("%s, %s, digest %s", plural(l.exact, "value"), plural(l.patterns, "pattern"), l.digest)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// valuesReader reads the values files of one load for every file's
// parser. It reads each file once, one read at a time, since an fs.FS
// need not be safe for concurrent use.
type valuesReader struct {
	fsys    fs.FS
	display func(string) string
	mu      sync.Mutex
	files   map[string]valuesRead // by cleaned name
}

type valuesRead struct {
	data string
	err  error
}

func newValuesReader(fsys fs.FS, display func(string) string) *valuesReader {
	return &valuesReader{fsys: fsys, display: display, files: map[string]valuesRead{}}
}

// read returns the content of the values file name, a valid fs path.
func (r *valuesReader) read(name string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.files[name]; ok {
		return f.data, f.err
	}
	f := r.readFile(name)
	r.files[name] = f
	return f.data, f.err
}

func (r *valuesReader) readFile(name string) valuesRead {
	f, err := r.fsys.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return valuesRead{err: fmt.Errorf("%s does not exist", name)}
	}
	if err != nil {
		return valuesRead{err: err}
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return valuesRead{err: err}
	}
	if !info.Mode().IsRegular() {
		return valuesRead{err: fmt.Errorf("%s is not a regular file", name)}
	}
	tooLarge := fmt.Errorf("%s holds more than the %d MiB a values file may hold", name, maxValuesFileSize>>20)
	if info.Size() > maxValuesFileSize {
		return valuesRead{err: tooLarge}
	}
	// The values are substrings of one string holding the file, read into
	// it directly: one allocation, not one per value or a copy of the file.
	var b strings.Builder
	b.Grow(int(info.Size()) + 1)
	n, err := io.Copy(&b, io.LimitReader(f, maxValuesFileSize+1))
	switch {
	case err != nil:
		return valuesRead{err: fmt.Errorf("reading %s: %w", name, err)}
	case n > maxValuesFileSize: // grown since the Stat
		return valuesRead{err: tooLarge}
	}
	return valuesRead{data: b.String()}
}

// names returns the files read without error, as Error.File names them,
// sorted.
func (r *valuesReader) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for name, f := range r.files {
		if f.err == nil {
			out = append(out, r.display(name))
		}
	}
	slices.Sort(out)
	return out
}

// valuesFileName checks the values_file name s and returns it cleaned, or
// a problem to report.
func valuesFileName(s string) (string, string) {
	name := path.Clean(s)
	if !fs.ValidPath(name) || name == "." {
		return "", fmt.Sprintf("values_file %q: want a path inside the configuration directory, relative to it, such as lists/revoked.txt", s)
	}
	for elem := range strings.SplitSeq(name, "/") {
		if strings.HasPrefix(elem, ".") {
			return "", fmt.Sprintf("values_file %q: names starting with \".\" are hidden, and tollgate neither loads nor watches them", s)
		}
	}
	if isYAML(name) {
		return "", fmt.Sprintf("values_file %q: a .yaml or .yml file is loaded as rules; give the list another name, such as lists/revoked.txt", s)
	}
	return name, ""
}

// valuesFile checks the values_file name s of the list node n and reads
// the file. It returns the file's content, or false after reporting a
// problem at f.
func (b *domainBuilder) valuesFile(f *field, s string, n *node) (string, bool) {
	if b.opts.RefuseValuesFiles != "" {
		b.errorf(f.key, n.path, "values_file: rules from %s cannot name files; list the values as descriptors", b.opts.RefuseValuesFiles)
		return "", false
	}
	name, problem := valuesFileName(s)
	if problem != "" {
		b.errorf(f.val, n.path, "%s", problem)
		return "", false
	}
	n.list.name, n.list.file = name, b.values.display(name)
	data, err := b.values.read(name)
	if err != nil {
		b.errorf(f.val, n.path, "values_file: %v", err)
		return "", false
	}
	return data, true
}

// location is where a value is defined, for duplicate errors.
type location struct {
	file string
	line int
}

// where names loc for an error reported in file: "line 3" in the same
// file, "lists/a.txt:3" in another.
func (loc location) where(file string) string {
	if loc.file == file {
		return "line " + strconv.Itoa(loc.line)
	}
	return loc.file + ":" + strconv.Itoa(loc.line)
}

// refFile names the file that defines the values of n: its values file,
// or the domain's file.
func (b *domainBuilder) refFile(n *node) string {
	if n.list != nil {
		return n.list.file
	}
	return b.file
}

// addValues adds the values of the values file data, read for the list
// node n, to the group g of n's level: the exact values to its map, the
// patterns to its wildcards, at n's place among them. Every problem names
// the values file and the line.
func (b *domainBuilder) addValues(g *group, n *node, data string) {
	l := n.list
	file := l.file
	values := make([]string, 0, strings.Count(data, "\n")+1) // for the digest
	if lines := cap(values); lines > len(g.exact) {
		// Size the map for every line at once rather than grow it step by
		// step; the few values already there are copied.
		exact := make(map[string]exactRef, len(g.exact)+lines)
		maps.Copy(exact, g.exact)
		g.exact = exact
	}
	tooMany := false
	data = strings.TrimPrefix(data, "\ufeff") // a byte-order mark some editors write
	for lineNo := 1; data != ""; lineNo++ {
		line, rest, _ := strings.Cut(data, "\n")
		data = rest
		v := strings.TrimSpace(line)
		if v == "" || v[0] == '#' {
			continue
		}
		if b.exhausted {
			return
		}
		switch {
		case !utf8.ValidString(v):
			b.errorIn(file, lineNo, n.path, "values_file: the line is not valid UTF-8")
			continue
		case trailingComment(v):
			b.errorIn(file, lineNo, n.path, "values_file: %q: a comment must start a line of its own", v)
			continue
		case strings.IndexByte(v, '*') >= 0:
			if i := slices.IndexFunc(g.wild, func(w wildRef) bool { return w.value == v }); i >= 0 {
				w := g.wild[i]
				b.errorIn(file, lineNo, n.path, "duplicate value %q (first at %s)", v, location{b.refFile(w.node), w.line}.where(file))
				continue
			}
			if len(g.wild) == b.opts.maxPatterns() {
				if !tooMany {
					b.errorIn(file, lineNo, n.path, "more than %d wildcard values of key %q at one level: a request tries them in turn (Options.MaxPatterns)", len(g.wild), n.key)
					tooMany = true
				}
				continue
			}
			g.wild = append(g.wild, wildRef{pattern: compileGlob(v), value: v, node: n, line: lineNo})
			l.patterns++
		default:
			if r, dup := g.exact[v]; dup {
				b.errorIn(file, lineNo, n.path, "duplicate value %q (first at %s)", v, location{b.refFile(r.node), r.line}.where(file))
				continue
			}
			g.exact[v] = exactRef{node: n, line: lineNo}
			l.exact++
		}
		values = append(values, v)
	}
	l.digest = digestSet(values)
}

// digestSet returns a digest of the set of values that does not depend on
// their order: the sum, modulo 2^256, of the SHA-256 of each value (an
// additive set hash), cut to 64 bits in hex. Summing costs a third of
// sorting a long list; a value listed twice is an error before this.
func digestSet(values []string) string {
	var sum [4]uint64
	var buf []byte
	for _, v := range values {
		buf = append(buf[:0], v...)
		h := sha256.Sum256(buf)
		var carry uint64
		for i := range sum {
			word := binary.BigEndian.Uint64(h[8*(3-i):])
			sum[i], carry = bits.Add64(sum[i], word, carry)
		}
	}
	var out [32]byte
	for i := range sum {
		binary.BigEndian.PutUint64(out[8*(3-i):], sum[i])
	}
	return hex.EncodeToString(out[:8])
}

// trailingComment reports whether v holds " #" or "\t#", which would make
// a comment after a value part of it.
func trailingComment(v string) bool {
	for i := strings.IndexByte(v, '#'); i >= 0; {
		if i > 0 && (v[i-1] == ' ' || v[i-1] == '\t') {
			return true
		}
		j := strings.IndexByte(v[i+1:], '#')
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}
