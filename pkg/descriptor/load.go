package descriptor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// Options controls how configuration is loaded. The zero value works.
type Options struct {
	// DefaultAlgorithm applies where neither a rule nor its domain's
	// defaults name one; zero means algorithm.TokenBucket.
	DefaultAlgorithm algorithm.Kind
}

// Load reads every *.yaml and *.yml file under dir, recursively, and
// builds a Tree. Names that start with "." are skipped, files and
// directories alike, so the "..data" and "..2026_…" directories of a
// Kubernetes ConfigMap mount are read once, through the top-level symlinks.
// Symlinks to files are followed; symlinks to directories are not.
//
// Loading is all-or-nothing: on any problem Load returns a nil Tree and
// every problem found, each an *Error, joined with errors.Join. An empty
// directory gives a Tree without domains.
func Load(dir string, opts Options) (*Tree, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("loading descriptors: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("loading descriptors: %s is not a directory", dir)
	}
	return load(os.DirFS(dir), func(name string) string {
		return filepath.Join(dir, filepath.FromSlash(name))
	}, opts)
}

// LoadFS is Load over a file system. Error file names are paths in fsys.
func LoadFS(fsys fs.FS, opts Options) (*Tree, error) {
	return load(fsys, func(name string) string { return name }, opts)
}

func load(fsys fs.FS, display func(string) string, opts Options) (*Tree, error) {
	if k := opts.DefaultAlgorithm; k != 0 && (k < algorithm.TokenBucket || k > algorithm.SlidingWindowLog) {
		return nil, fmt.Errorf("loading descriptors: invalid Options.DefaultAlgorithm %d", k)
	}
	var errs errorList
	files := findFiles(fsys, display, &errs)
	t := &Tree{domains: map[string]*Domain{}}
	for _, name := range files {
		file := display(name)
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			errs.add(file, 0, "", "%v", err)
			continue
		}
		p := &parser{file: file, opts: opts, errs: &errs, budget: maxYAMLNodes}
		d := p.parseFile(data)
		if d == nil {
			continue
		}
		if prev := t.domains[d.name]; prev != nil {
			errs.add(file, d.line, "", "domain %q is already defined in %s", d.name, prev.file)
			continue
		}
		t.domains[d.name] = d
	}
	if err := errs.join(); err != nil {
		return nil, err
	}
	for name := range t.domains {
		t.names = append(t.names, name)
	}
	slices.Sort(t.names)
	sum := sha256.Sum256([]byte(t.String()))
	t.hash = hex.EncodeToString(sum[:])
	return t, nil
}

// findFiles lists the configuration files of fsys in sorted order.
func findFiles(fsys fs.FS, display func(string) string, errs *errorList) []string {
	var files []string
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if d == nil {
				return err // the root itself is unreadable
			}
			errs.add(display(name), 0, "", "%v", err)
			return nil
		}
		if name == "." {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || !isYAML(d.Name()) {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			info, err := fs.Stat(fsys, name)
			if err != nil {
				errs.add(display(name), 0, "", "%v", err)
				return nil
			}
			if !info.Mode().IsRegular() {
				return nil
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		files = append(files, name)
		return nil
	})
	if err != nil {
		errs.add(display("."), 0, "", "%v", err)
	}
	slices.Sort(files)
	return files
}

func isYAML(name string) bool {
	ext := strings.ToLower(path.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}
