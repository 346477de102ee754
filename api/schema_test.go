package api_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/tools/txtar"
	"gopkg.in/yaml.v3"

	"github.com/tollgatehq/tollgate/api"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

const (
	examplesDir = "../config-examples"
	goldenDir   = "../pkg/descriptor/testdata"
	schemaFile  = "descriptor.schema.json"
)

func compile(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(api.DescriptorSchema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(schemaFile, doc); err != nil {
		t.Fatal(err)
	}
	// Compile checks the schema against the draft 2020-12 meta-schema.
	sch, err := c.Compile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// errYAML marks a file that is not YAML the schema can see: a syntax
// error, a duplicate key, an anchor that contains itself. Editors report
// those without a schema.
var errYAML = errors.New("not valid YAML")

// validate checks the first YAML document of data against sch. It returns
// nil, an error wrapping errYAML, or a *jsonschema.ValidationError.
func validate(sch *jsonschema.Schema, data []byte) error {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("%w: %w", errYAML, err)
	}
	return sch.Validate(jsonValue(v))
}

// jsonValue turns decoded YAML into the JSON data model: mappings with
// non-string keys, such as metadata {1: x}, get their keys as the
// descriptor decoder reads them, as strings.
func jsonValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = jsonValue(e)
		}
		return v
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = jsonValue(e)
		}
		return m
	case []any:
		for i, e := range v {
			v[i] = jsonValue(e)
		}
		return v
	}
	return v
}

// leaves lists the innermost failures of err, one "instance-location
// keyword" each, such as "/descriptors/0/rate_limit/unit pattern", or
// the kind of failure where no keyword names it: FalseSchema for a
// property the schema forbids in that place, Not for "not".
func leaves(err error) []string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{err.Error()}
	}
	var out []string
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		kw := strings.Join(e.ErrorKind.KeywordPath(), "/")
		if kw == "" { // a kind of its own, such as kind.FalseSchema
			kw = strings.TrimPrefix(fmt.Sprintf("%T", e.ErrorKind), "*kind.")
		}
		out = append(out, "/"+strings.Join(e.InstanceLocation, "/")+" "+kw)
	}
	walk(ve)
	return out
}

// configFile reports whether the descriptor loader reads the file at the
// slash-separated path name: a *.yaml or *.yml file with no path element
// starting with ".".
func configFile(name string) bool {
	for _, elem := range strings.Split(name, "/") {
		if strings.HasPrefix(elem, ".") {
			return false
		}
	}
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// TestConfigExamples validates every file of config-examples/ and checks
// that its first line points editors at the schema.
func TestConfigExamples(t *testing.T) {
	sch := compile(t)
	n := 0
	err := filepath.WalkDir(examplesDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !configFile(filepath.ToSlash(p)[len(examplesDir)+1:]) {
			return err
		}
		n++
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(filepath.Dir(abs(t, p)), abs(t, schemaFile))
		if err != nil {
			return err
		}
		want := "# yaml-language-server: $schema=" + filepath.ToSlash(rel)
		if first, _, _ := strings.Cut(string(data), "\n"); first != want {
			t.Errorf("%s: first line %q, want %q", p, first, want)
		}
		if err := validate(sch, data); err != nil {
			t.Errorf("%s: %v", p, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("no configuration files in %s", examplesDir)
	}
}

func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// goldenClasses sorts the decoder's golden error messages into those the
// schema mirrors (mirrored: the schema must reject the case too) and those
// it leaves to the decoder because they need the whole file, other files,
// arithmetic or a default from outside the mapping (the schema's
// top-level description lists them). The first matching substring wins.
// A message that matches none fails the test, so a new golden case is
// sorted here on purpose.
var goldenClasses = []struct {
	substr   string
	mirrored bool
}{
	// Left to the decoder.
	{"want a path inside the configuration directory", false},
	{`names starting with "." are hidden`, false},
	{"file is loaded as rules", false},
	{"does not exist", false},
	{"is not a regular file", false},
	{"duplicate value", false},
	{"a comment must start a line of its own", false},
	{"is not valid UTF-8", false},
	{"cannot name files", false},
	{"(the algorithm comes from ", false},
	{"duplicate descriptor", false},
	{"is already defined in", false},
	{"shard_by: no descriptor of the domain has key", false},
	{"but no limit of the domain has that name", false},
	{"a limit cannot replace itself", false},
	{"so both would count in one counter", false},
	{"is longer than the algorithms support", false},
	{"takes ", false}, // a token bucket's refill time
	{"a second YAML document", false},
	{"wildcard values of key", false},
	{"is shorter than the cooldown", false},
	{"want a duration from", false}, // the range; the form is mirrored
	{"a penalty cannot apply to a limit charged always", false},
	{"a number must be finite", false}, // YAML's .inf and .nan are numbers to a schema
	{"its tag is not supported", false},
	{"(and not <<, a merge)", false},
	{"nested deeper than", false},
	{"duplicate key", true}, // by the YAML parser
	// Mirrored by the schema, or by the YAML parser before it.
	{"invalid YAML", true},
	{"duplicate field", true},
	{"descriptors are nested more than", true}, // only an alias loop nests that deep
	{"unknown field", true},
	{"unknown unit", true},
	{"unknown algorithm", true},
	{"unknown charge", true},
	{"unknown precision", true},
	{"unknown action", true},
	{"unknown failure mode", true},
	{"want a ", true},
	{"want true or false", true},
	{"missing domain", true},
	{"domain is empty", true},
	{"missing key", true},
	{"key is empty", true},
	{"is required", true},
	{"name is empty", true},
	{"cannot both be set", true},
	{"the list is empty", true},
	{"cannot be combined with", true},
	{"values_file is empty", true},
	{"must be the only limit", true},
	{"has no effect on a descriptor without", true},
	{"share_threshold needs a wildcard value", true},
	{"burst applies only to token_bucket", true},
	{"sliding_window_log stores one entry per admitted hit", true},
	{"precision cached does not apply to", true},
	{"unit_multiplier must be at least 1", true},
	{"tolerance: at most", true},
}

func mirrored(msg string) (bool, error) {
	for _, c := range goldenClasses {
		if strings.Contains(msg, c.substr) {
			return c.mirrored, nil
		}
	}
	return false, fmt.Errorf("unclassified decoder error %q: add it to goldenClasses", msg)
}

// TestGoldenInputs validates the input files of the decoder's golden
// cases: the schema accepts every case the decoder accepts, rejects every
// case with an error it mirrors, and accepts the cases whose errors are
// all left to the decoder, so that goldenClasses stays true.
func TestGoldenInputs(t *testing.T) {
	sch := compile(t)
	paths, err := filepath.Glob(filepath.Join(goldenDir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no golden cases in %s", goldenDir)
	}
	for _, p := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(p), ".txt"), func(t *testing.T) {
			// A golden case is a txtar archive of input files and a
			// "want" or "error" section (see package descriptor's
			// golden_test.go).
			a, err := txtar.ParseFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var files []txtar.File
			kind, expected := "", ""
			for _, f := range a.Files {
				switch f.Name {
				case "want", "error":
					kind, expected = f.Name, string(f.Data)
				default:
					files = append(files, f)
				}
			}
			wantReject := false
			switch kind {
			case "want":
			case "error":
				for _, line := range strings.Split(strings.TrimSuffix(expected, "\n"), "\n") {
					m, err := mirrored(line)
					if err != nil {
						t.Fatal(err)
					}
					wantReject = wantReject || m
				}
			default:
				t.Fatalf("no want or error section")
			}
			var rejected []string
			for _, f := range files {
				if !configFile(f.Name) {
					continue
				}
				if err := validate(sch, f.Data); err != nil {
					rejected = append(rejected, fmt.Sprintf("%s: %v", f.Name, leaves(err)))
				}
			}
			switch {
			case wantReject && len(rejected) == 0:
				t.Errorf("the schema accepts what the decoder rejects with:\n%s", expected)
			case !wantReject && len(rejected) > 0:
				t.Errorf("the schema rejects what the decoder %s:\n%s", map[string]string{
					"want":  "accepts",
					"error": "rejects only with errors that goldenClasses leaves to the decoder",
				}[kind], strings.Join(rejected, "\n"))
			}
		})
	}
}

// TestSchemaRules checks each rule of the schema on a small file, and that
// the decoder agrees: it accepts exactly the files the schema accepts.
func TestSchemaRules(t *testing.T) {
	sch := compile(t)
	const head = "domain: d\ndescriptors:\n  - key: a\n"
	// limit is a descriptor with one rate_limit of the given fields.
	limit := func(fields string) string {
		return head + "    rate_limit: {" + fields + "}\n"
	}
	tests := []struct {
		name string
		yaml string
		want string // a failure among leaves(err); "" if the file is valid
	}{
		{"minimal", "domain: d\n", ""},
		{"scalar domain", "domain: 7\ndescriptors: null\ndefaults: null\n", ""},
		{"units in any case", head + "    rate_limits:\n" +
			"      - {unit: SECOND, requests_per_unit: 1}\n      - {unit: Minute, requests_per_unit: 1}\n" +
			"      - {unit: hOUR, requests_per_unit: 1}\n      - {unit: day, requests_per_unit: 1}\n" +
			"      - {unit: WEEK, requests_per_unit: 1}\n      - {unit: month, requests_per_unit: 1}\n" +
			"      - {unit: Year, requests_per_unit: 1}\n", ""},
		{"every envoyproxy field", head + "    value: x*\n    shadow_mode: yes\n    quota_mode: true\n" +
			"    detailed_metric: Off\n    value_to_metric: false\n    share_threshold: true\n" +
			"    metadata: {team: search, 1: 2, empty: null}\n" +
			"    rate_limit: {name: n, unit: second, requests_per_unit: 0, replaces: [{name: m}]}\n" +
			"    descriptors:\n      - key: b\n        value: 200\n        rate_limit: {name: m, unlimited: true}\n", ""},
		{"every extension", "domain: d\nshard_by: a\ndefaults: {algorithm: Fixed_Window, failure_mode: LOCAL, burst: 3, charge: Always, precision: Cached}\n" +
			"descriptors:\n  - key: a\n    value: x\n    action: ALLOW\n    failure_mode: closed\n" +
			"  - key: a\n    failure_mode: open\n    rate_limits:\n" +
			"      - {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20, precision: strict}\n" +
			"      - {unit: minute, requests_per_unit: 10, unit_multiplier: 5, algorithm: sliding_window_counter, precision: cached}\n" +
			"      - {unit: hour, requests_per_unit: 10000, algorithm: SLIDING_WINDOW_LOG, charge: admitted, precision: STRICT}\n", ""},
		{"nulls read as unset", head + "    value: null\n    action: null\n    failure_mode: null\n" +
			"    shadow_mode: null\n    metadata: null\n    descriptors: null\n" +
			"    rate_limit: {unit: second, requests_per_unit: 1, name: null, algorithm: null, unlimited: null, replaces: null}\n", ""},

		{"unknown top-level field", "domain: d\ndescriptor: []\n", "/ additionalProperties"},
		{"unknown descriptor field", head + "    vlaue: x\n", "/descriptors/0 additionalProperties"},
		{"unknown rate_limit field", limit("unit: second, requests_per_unit: 1, requests_per_minute: 1"), "/descriptors/0/rate_limit additionalProperties"},
		{"unknown defaults field", "domain: d\ndefaults: {refill: fast}\n", "/defaults additionalProperties"},
		{"unknown replaces field", limit("unit: second, requests_per_unit: 1, replaces: [{name: x, nam: y}]"), "/descriptors/0/rate_limit/replaces/0 additionalProperties"},
		{"bad unit", limit("unit: fortnight, requests_per_unit: 1"), "/descriptors/0/rate_limit/unit pattern"},
		{"unit abbreviated", limit("unit: sec, requests_per_unit: 1"), "/descriptors/0/rate_limit/unit pattern"},
		{"unit plural", limit("unit: weeks, requests_per_unit: 1"), "/descriptors/0/rate_limit/unit pattern"},
		{"unit null", limit("unit: null, requests_per_unit: 1"), "/descriptors/0/rate_limit/unit type"},
		{"bad algorithm", limit("unit: second, requests_per_unit: 1, algorithm: leaky_bucket"), "/descriptors/0/rate_limit/algorithm pattern"},
		{"bad default algorithm", "domain: d\ndefaults: {algorithm: gcra}\n", "/defaults/algorithm pattern"},
		{"bad charge", limit("unit: second, requests_per_unit: 1, charge: sometimes"), "/descriptors/0/rate_limit/charge pattern"},
		{"bad default charge", "domain: d\ndefaults: {charge: never}\n", "/defaults/charge pattern"},
		{"charge on unlimited", limit("unlimited: true, charge: always"), "/descriptors/0/rate_limit/charge FalseSchema"},
		{"bad precision", limit("unit: second, requests_per_unit: 1, precision: exact"), "/descriptors/0/rate_limit/precision pattern"},
		{"bad default precision", "domain: d\ndefaults: {precision: loose}\n", "/defaults/precision pattern"},
		{"precision on unlimited", limit("unlimited: true, precision: cached"), "/descriptors/0/rate_limit/precision FalseSchema"},
		{"precision cached on a log", limit("unit: second, requests_per_unit: 1, algorithm: sliding_window_log, precision: cached"), "/descriptors/0/rate_limit/precision pattern"},
		{"precision strict on a log", limit("unit: second, requests_per_unit: 1, algorithm: Sliding_Window_Log, precision: strict"), ""},
		{"bad action", head + "    action: block\n", "/descriptors/0/action pattern"},
		{"bad failure mode", head + "    failure_mode: ajar\n    action: deny\n", "/descriptors/0/failure_mode pattern"},
		{"quoted true", head + "    shadow_mode: \"true\"\n", "/descriptors/0/shadow_mode enum"},
		{"count not a number", limit("unit: second, requests_per_unit: ten"), "/descriptors/0/rate_limit/requests_per_unit type"},
		{"count negative", limit("unit: second, requests_per_unit: -1"), "/descriptors/0/rate_limit/requests_per_unit minimum"},
		{"count too large", limit("unit: second, requests_per_unit: 4294967296"), "/descriptors/0/rate_limit/requests_per_unit maximum"},
		{"burst null", limit("unit: second, requests_per_unit: 1, burst: null"), "/descriptors/0/rate_limit/burst type"},
		{"descriptors a mapping", head + "    descriptors: {key: b}\n", "/descriptors/0/descriptors type"},
		{"descriptor a string", "domain: d\ndescriptors: [just a string]\n", "/descriptors/0 type"},
		{"metadata a list", head + "    metadata: [x]\n", "/descriptors/0/metadata type"},
		{"metadata nested", head + "    metadata: {x: [y, 1, {z: yes}], n: {m: ~}}\n", ""},
		{"missing domain", "descriptors: []\n", "/ required"},
		{"empty domain", "domain: \"\"\n", "/domain minLength"},
		{"empty file", "# nothing\n", "/ type"},
		{"missing key", "domain: d\ndescriptors:\n  - value: x\n", "/descriptors/0 required"},
		{"empty key", "domain: d\ndescriptors:\n  - key: \"\"\n", "/descriptors/0/key minLength"},
		{"empty shard_by", "domain: d\nshard_by: \"\"\ndescriptors: [{key: a}]\n", "/shard_by minLength"},
		{"missing unit", limit("requests_per_unit: 1"), "/descriptors/0/rate_limit required"},
		{"missing requests_per_unit", limit("unit: second"), "/descriptors/0/rate_limit required"},
		{"rate_limit null", head + "    rate_limit: null\n", "/descriptors/0/rate_limit type"},
		{"unlimited with unit", limit("unlimited: true, unit: second"), "/descriptors/0/rate_limit/unit FalseSchema"},
		{"unlimited yes with unit_multiplier", limit("unlimited: yes, unit_multiplier: 2"), "/descriptors/0/rate_limit/unit_multiplier FalseSchema"},
		{"not unlimited needs a unit", limit("unlimited: false, requests_per_unit: 1"), "/descriptors/0/rate_limit required"},
		{"unlimited among several", head + "    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unlimited: true}\n", "/descriptors/0/rate_limits maxItems"},
		{"rate_limit and rate_limits", head + "    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: [{unit: minute, requests_per_unit: 1}]\n", "/descriptors/0 Not"},
		{"rate_limits empty", head + "    rate_limits: []\n", "/descriptors/0/rate_limits minItems"},
		{"action with rate_limit", head + "    action: deny\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "/descriptors/0/rate_limit FalseSchema"},
		{"action with rate_limits", head + "    action: allow\n    rate_limits: [{unit: second, requests_per_unit: 1}]\n", "/descriptors/0/rate_limits FalseSchema"},
		{"failure_mode without a rule", head + "    failure_mode: closed\n    descriptors: [{key: b}]\n", "/descriptors/0 required"},
		{"share_threshold on an exact value", head + "    value: exact\n    share_threshold: true\n", "/descriptors/0/value pattern"},
		{"share_threshold without a value", head + "    share_threshold: on\n", "/descriptors/0 required"},
		{"burst on fixed_window", limit("unit: second, requests_per_unit: 1, algorithm: fixed_window, burst: 5"), "/descriptors/0/rate_limit/burst FalseSchema"},
		{"sliding_window_log too large", limit("unit: hour, requests_per_unit: 10001, algorithm: sliding_window_log"), "/descriptors/0/rate_limit/requests_per_unit maximum"},
		{"unit_multiplier zero", limit("unit: minute, requests_per_unit: 1, unit_multiplier: 0"), "/descriptors/0/rate_limit/unit_multiplier minimum"},
		{"replaces without name", limit("unit: second, requests_per_unit: 1, replaces: [{}]"), "/descriptors/0/rate_limit/replaces/0 required"},
		{"replaces empty name", limit("unit: second, requests_per_unit: 1, replaces: [{name: \"\"}]"), "/descriptors/0/rate_limit/replaces/0/name minLength"},
		{"values_file", head + "    values_file: list.txt\n    action: deny\n    descriptors: [{key: b, action: allow}]\n", ""},
		{"values_file with a null value", head + "    value: null\n    values_file: list.txt\n", ""},
		{"values_file with value", head + "    value: x\n    values_file: list.txt\n", "/descriptors/0 Not"},
		{"values_file with a number value", head + "    value: 7\n    values_file: list.txt\n", "/descriptors/0 Not"},
		{"values_file empty", head + "    values_file: \"\"\n", "/descriptors/0/values_file minLength"},
		{"values_file null", head + "    values_file: null\n", "/descriptors/0/values_file type"},
		{"values_file a list", head + "    values_file: [list.txt]\n", "/descriptors/0/values_file type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validate(sch, []byte(tt.yaml))
			var got []string
			if err != nil {
				got = leaves(err)
			}
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("schema rejects: %v", got)
			case tt.want != "" && !slices.Contains(got, tt.want):
				t.Errorf("schema failures %q, want one %q", got, tt.want)
			}
			// list.txt is there for the cases that name it as a values file.
			_, decodeErr := descriptor.LoadFS(fstest.MapFS{"f.yaml": {Data: []byte(tt.yaml)}, "list.txt": {Data: []byte("v\n")}}, descriptor.Options{})
			if (decodeErr == nil) != (err == nil) {
				t.Errorf("the decoder disagrees: it returns %v", decodeErr)
			}
		})
	}
}

// TestDescriptions checks that every property the schema defines, in
// every place, has a description for editors to show.
func TestDescriptions(t *testing.T) {
	var doc any
	if err := json.Unmarshal([]byte(api.DescriptorSchema()), &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if props, ok := v["properties"].(map[string]any); ok {
				for name, p := range props {
					if s, ok := p.(map[string]any); ok {
						n++
						if d, _ := s["description"].(string); d == "" {
							t.Errorf("%s/properties/%s has no description", where, name)
						}
					}
				}
			}
			for k, e := range v {
				switch k {
				case "if", "then", "else", "not", "contains":
					// Conditions restate properties defined elsewhere.
				default:
					walk(path.Join(where, k), e)
				}
			}
		case []any:
			for i, e := range v {
				walk(path.Join(where, fmt.Sprint(i)), e)
			}
		}
	}
	walk("#", doc)
	if n < 30 {
		t.Errorf("found %d properties; the schema defines more", n)
	}
}
