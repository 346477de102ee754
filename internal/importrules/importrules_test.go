// Package importrules holds the test that keeps the house one-way: which
// package of tollgate may import which, as the package table of the design
// document draws it. Arrows run down the table; an arrow back up or across
// fails the test, and so does a package the table does not name, so that a
// new room is placed on purpose.
package importrules

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/tollgatehq/tollgate/"

// mayImport names, for each package of the module (by its path in the
// module), the packages of the module its non-test code may import. "*"
// stands for every package of pkg/ but the CLI.
var mayImport = map[string][]string{
	"cmd/tollgate": {"pkg/cli"},
	"pkg/cli": {"pkg/app", "pkg/admin", "pkg/rlsclient", "pkg/loadgen", "pkg/store/redis", "api",
		"pkg/rls", "pkg/descriptor", "pkg/override", "pkg/version", "pkg/record"},
	"pkg/app":              {"*"},
	"pkg/app/ratelimitenv": {},

	"pkg/admin":   {"pkg/limiter", "pkg/override", "pkg/audit", "pkg/httpapi", "pkg/descriptor", "pkg/algorithm", "pkg/reload", "pkg/top", "pkg/record"},
	"pkg/ui":      {"pkg/admin"},
	"pkg/rls":     {"pkg/limiter", "pkg/descriptor"},
	"pkg/httpapi": {"pkg/limiter", "pkg/descriptor"},
	"pkg/limiter": {"pkg/descriptor", "pkg/override", "pkg/store", "pkg/algorithm"},

	"pkg/override":           {"pkg/descriptor"},
	"pkg/override/redis":     {"pkg/override", "pkg/descriptor", "pkg/signature"},
	"pkg/override/statefile": {"pkg/override", "pkg/descriptor"},
	"pkg/top":                {"pkg/descriptor"},
	"pkg/top/redis":          {"pkg/top", "pkg/descriptor"},
	"pkg/record":             {"pkg/limiter", "pkg/descriptor", "pkg/override", "pkg/store/memory"},
	"pkg/shadow":             {"pkg/limiter", "pkg/descriptor", "pkg/store/memory", "pkg/top"},
	"pkg/fleet":              {"pkg/store", "pkg/algorithm", "pkg/signature"},
	"pkg/reload":             {"pkg/descriptor"},
	"pkg/xds":                {"pkg/descriptor", "pkg/tlsfiles"},
	"pkg/descriptor":         {"pkg/algorithm"},

	"pkg/store":           {"pkg/algorithm"},
	"pkg/store/memory":    {"pkg/store", "pkg/algorithm"},
	"pkg/store/redis":     {"pkg/store", "pkg/algorithm", "pkg/tlsfiles"},
	"pkg/store/breaker":   {"pkg/store", "pkg/algorithm"},
	"pkg/store/overlimit": {"pkg/store", "pkg/algorithm"},
	"pkg/store/cached":    {"pkg/store", "pkg/algorithm"},
	"pkg/algorithm":       {},

	"pkg/audit":     {},
	"pkg/telemetry": {},
	"pkg/tlsfiles":  {},
	"pkg/version":   {},
	"pkg/signature": {},
	"pkg/rlsclient": {"pkg/descriptor", "pkg/tlsfiles"},
	"pkg/loadgen":   {"pkg/descriptor", "pkg/tlsfiles", "pkg/rlsclient"},
	"api":           {},

	// Shared vectors and fixtures, beside the code they test.
	"pkg/algorithm/algorithmtest": {"pkg/algorithm"},
	"pkg/store/storetest":         {"pkg/store", "pkg/algorithm", "pkg/algorithm/algorithmtest"},
	"pkg/tlsfiles/tlsfilestest":   {"pkg/tlsfiles"},
}

// Packages of these trees are test helpers and test-only programs: they
// may import anything, and nothing but tests and each other may import
// them.
var testTrees = []string{"internal/", "integration", "envoy"}

// pkg is what `go list` says of one package.
type pkg struct {
	ImportPath                         string
	Imports, TestImports, XTestImports []string
}

func TestImportRules(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", module+"...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs, err := decode(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 30 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	if err := check(pkgs); err != nil {
		t.Error(err)
	}
}

// TestCheckFails holds check to failing on each kind of wrong arrow.
func TestCheckFails(t *testing.T) {
	tests := []struct {
		name string
		pkg  pkg
		want string
	}{
		{"up the table", pkg{ImportPath: "pkg/descriptor", Imports: []string{"pkg/store"}},
			"pkg/descriptor imports pkg/store, which the table does not allow"},
		{"across", pkg{ImportPath: "pkg/store/cached", Imports: []string{"pkg/store/breaker"}},
			"pkg/store/cached imports pkg/store/breaker, which the table does not allow"},
		{"the CLI from app", pkg{ImportPath: "pkg/app", Imports: []string{"pkg/cli"}},
			"pkg/app imports pkg/cli, which the table does not allow"},
		{"a test helper from the service", pkg{ImportPath: "pkg/limiter", Imports: []string{"internal/polltest"}},
			"pkg/limiter imports internal/polltest, which the table does not allow"},
		{"integration from a package's tests", pkg{ImportPath: "pkg/fleet", XTestImports: []string{"integration/leasesim"}},
			"the tests of pkg/fleet import integration/leasesim"},
		{"a package the table does not name", pkg{ImportPath: "pkg/utils"},
			"pkg/utils: not in the table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.pkg
			p.ImportPath = module + p.ImportPath
			for _, list := range []*[]string{&p.Imports, &p.TestImports, &p.XTestImports} {
				for i, imp := range *list {
					(*list)[i] = module + imp
				}
			}
			err := check([]pkg{p})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("check = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// decode reads the stream of JSON objects `go list -json` prints.
func decode(out []byte) ([]pkg, error) {
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			return pkgs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decoding go list: %w", err)
		}
		pkgs = append(pkgs, p)
	}
}

// check returns every import of pkgs that the rules do not allow.
func check(pkgs []pkg) error {
	var errs []error
	for _, p := range pkgs {
		path, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok || isTestTree(path) {
			continue
		}
		allowed, ok := mayImport[path]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: not in the table of importrules_test.go; place it", path))
			continue
		}
		for _, imp := range p.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok || slices.Contains(allowed, dep) {
				continue
			}
			if slices.Contains(allowed, "*") && strings.HasPrefix(dep, "pkg/") && dep != "pkg/cli" && !isTestTree(dep) {
				continue
			}
			errs = append(errs, fmt.Errorf("%s imports %s, which the table does not allow", path, dep))
		}
		testImports := slices.Concat(p.TestImports, p.XTestImports)
		slices.Sort(testImports)
		for _, imp := range slices.Compact(testImports) {
			if dep, ok := strings.CutPrefix(imp, module); ok && strings.HasPrefix(dep, "integration") {
				errs = append(errs, fmt.Errorf("the tests of %s import %s: shared test helpers live under internal/", path, dep))
			}
		}
	}
	return errors.Join(errs...)
}

func isTestTree(path string) bool {
	return slices.ContainsFunc(testTrees, func(tree string) bool { return strings.HasPrefix(path, tree) })
}
