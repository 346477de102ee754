package descriptor

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// Options controls how configuration is loaded. The zero value works.
type Options struct {
	// DefaultAlgorithm applies where neither a rule nor its domain's
	// defaults name one; zero means algorithm.TokenBucket.
	DefaultAlgorithm algorithm.Kind
	// DefaultFailureMode applies where neither a rule nor its domain's
	// defaults name one; zero means FailOpen.
	DefaultFailureMode FailureMode
	// DefaultCharge applies where neither a limit nor its domain's
	// defaults name one; the zero value is algorithm.ChargeAdmitted.
	DefaultCharge algorithm.Charge
	// DefaultPrecision applies where neither a limit nor its domain's
	// defaults name one, to limits that can be leased (a
	// sliding_window_log limit stays strict); the zero value is
	// PrecisionStrict.
	DefaultPrecision Precision
	// MaxPatterns bounds the wildcard values of one key at one level, such
	// as the patterns of an allow or deny list, which a request tries in
	// turn (exact values are looked up at once, whatever their number).
	// Zero means DefaultMaxPatterns.
	MaxPatterns int
	// RefuseValuesFiles, when set, names where the rules come from, such
	// as "xDS", and makes every values_file an error: such rules have no
	// directory to read files from.
	RefuseValuesFiles string
	// Tune, when set, changes one field of one limit as if its file said
	// so, validated as the file's own value would be: replay's sweep
	// tries several values of a limit on recorded traffic. Loading fails
	// when it names no limit, or a rule of several limits without naming
	// one.
	Tune *Tune
}

// Tune names one limit and the value one of its fields takes.
type Tune struct {
	Domain string
	// Rule is the rule's Path, as the recordings, explain and the admin
	// API name it.
	Rule string
	// Limit is the limit's name; "" names the rule's only limit.
	Limit string
	// Field is TuneRequests or TuneBurst.
	Field string
	Value uint32
}

// The fields a Tune can change.
const (
	TuneRequests = "requests_per_unit"
	TuneBurst    = "burst"
)

// check reports what makes tn unusable on t: a domain, rule or limit it
// names that t lacks, or a rule of several limits without a limit name.
func (tn *Tune) check(t *Tree) error {
	d := t.Domain(tn.Domain)
	if d == nil {
		return fmt.Errorf("tune: no domain %q", tn.Domain)
	}
	r := d.Rule(tn.Rule)
	if r == nil || len(r.Limits) == 0 {
		return fmt.Errorf("tune: domain %q has no rule %q with a limit", tn.Domain, tn.Rule)
	}
	if tn.Limit == "" {
		if len(r.Limits) > 1 {
			return fmt.Errorf("tune: rule %q has %d limits; name one", tn.Rule, len(r.Limits))
		}
		return nil
	}
	for _, l := range r.Limits {
		if l.Name == tn.Limit {
			return nil
		}
	}
	return fmt.Errorf("tune: rule %q has no limit named %q", tn.Rule, tn.Limit)
}

// DefaultMaxPatterns is the default of Options.MaxPatterns.
const DefaultMaxPatterns = 1000

func (o Options) maxPatterns() int {
	if o.MaxPatterns <= 0 {
		return DefaultMaxPatterns
	}
	return o.MaxPatterns
}

// Load reads every *.yaml and *.yml file under dir, recursively, and
// builds a Tree. Names that start with "." are skipped, files and
// directories alike, so the "..data" and "..2026_…" directories of a
// Kubernetes ConfigMap mount are read once, through the top-level symlinks.
// Symlinks to files are followed; symlinks to directories are not. The
// values files that values_file fields name are read from dir too.
//
// Loading is all-or-nothing: on any problem Load returns a nil Tree and
// every problem found, each an *Error, joined with errors.Join. An empty
// directory gives a Tree without domains.
func Load(dir string, opts Options) (*Tree, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
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
		return nil, fmt.Errorf("invalid Options.DefaultAlgorithm %d", k)
	}
	if m := opts.DefaultFailureMode; m > FailLocal {
		return nil, fmt.Errorf("invalid Options.DefaultFailureMode %d", m)
	}
	if c := opts.DefaultCharge; c > algorithm.ChargeAlways {
		return nil, fmt.Errorf("invalid Options.DefaultCharge %d", c)
	}
	if p := opts.DefaultPrecision; p > PrecisionCached {
		return nil, fmt.Errorf("invalid Options.DefaultPrecision %d", p)
	}
	if tn := opts.Tune; tn != nil && tn.Field != TuneRequests && tn.Field != TuneBurst {
		return nil, fmt.Errorf("tune: field %q (want %s or %s)", tn.Field, TuneRequests, TuneBurst)
	}
	var errs errorList
	files := findFiles(fsys, display, &errs)
	t := &Tree{domains: map[string]*Domain{}}
	values := newValuesReader(fsys, display)
	for i, f := range parseFiles(fsys, display, files, opts, values) {
		errs = append(errs, f.errs...)
		d := f.domain
		if d == nil {
			continue
		}
		if prev := t.domains[d.name]; prev != nil {
			errs.add(display(files[i]), d.line, "", "domain %q is already defined in %s", d.name, prev.file)
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
	t.valuesFiles = values.names()
	if opts.Tune != nil {
		if err := opts.Tune.check(t); err != nil {
			return nil, err
		}
	}
	t.hash = t.digest()
	return t, nil
}

// parsedFile is what decoding one file gave: its domain, or nil, and its
// problems.
type parsedFile struct {
	domain *Domain
	errs   errorList
	panic  any // a panic of the decoder's goroutine, for the caller's
}

// parseFiles reads the files one after another, then decodes them on up to
// GOMAXPROCS goroutines, decoding being most of a load. The outcome is in
// the order of files and the same as one goroutine's: each file has its
// own parser and error list. A panic is raised again in the caller's
// goroutine, so that a caller that recovers from panics still can.
func parseFiles(fsys fs.FS, display func(string) string, files []string, opts Options, values *valuesReader) []parsedFile {
	out := make([]parsedFile, len(files))
	data := make([][]byte, len(files))
	for i, name := range files {
		var err error
		// An fs.FS need not be safe for concurrent use: read in one goroutine.
		if data[i], err = fs.ReadFile(fsys, name); err != nil {
			out[i].errs.add(display(name), 0, "", "%v", err)
		}
	}
	parse := func(i int) {
		if out[i].errs != nil {
			return // unreadable, as recorded
		}
		defer func() {
			if r := recover(); r != nil {
				out[i].panic = r
			}
		}()
		p := newParser(display(files[i]), opts, values, &out[i].errs)
		out[i].domain = p.parseFile(data[i])
		data[i] = nil // let the collector have it
	}
	if workers := min(runtime.GOMAXPROCS(0), len(files)); workers <= 1 {
		for i := range files {
			parse(i)
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(files) {
						return
					}
					parse(i)
				}
			})
		}
		wg.Wait()
	}
	for i := range out {
		if out[i].panic != nil {
			panic(out[i].panic)
		}
	}
	return out
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
