package envoy_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/tollgatehq/tollgate/envoy/internal/envoytest"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// The top-level README and its sections on token budgets and leased
// budgets, whose YAML snippets are each introduced by an HTML comment
// saying what checks it:
// "<!-- excerpt of PATH -->" (PATH from the repository root) or
// "<!-- checked by envoy/readme_test.go: NAME -->".
const (
	topReadme          = "../README.md"
	tokenBudgetSection = "## Token budgets (LLM usage)"
	leasedSection      = "## Leased budgets (`precision: cached`)"
)

// snippet is a fenced YAML block of a README and the comment before it.
type snippet struct {
	line    int
	comment string
	text    string
}

var snippetComment = regexp.MustCompile(`^<!-- (excerpt of (\S+)|checked by envoy/readme_test\.go: (.+)) -->$`)

// readmeSnippets returns the YAML blocks of the section of text that
// starts with heading, up to the next heading of its level.
func readmeSnippets(text, heading string) ([]snippet, error) {
	lines := strings.Split(text, "\n")
	start := -1
	for i, l := range lines {
		if l == heading {
			start = i
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("no section %q", heading)
	}
	var out []snippet
	for i := start + 1; i < len(lines) && !strings.HasPrefix(lines[i], "## "); i++ {
		if lines[i] != "```yaml" {
			continue
		}
		s := snippet{line: i + 1}
		if i > 0 {
			s.comment = lines[i-1]
		}
		j := i + 1
		for j < len(lines) && lines[j] != "```" {
			j++
		}
		s.text = strings.Join(lines[i+1:j], "\n")
		out = append(out, s)
		i = j
	}
	return out, nil
}

// excerptOf reports whether every line of block, in order, is a
// contiguous run of lines of file, all indented by the same extra spaces.
func excerptOf(block, file string) bool {
	bl := strings.Split(block, "\n")
	fl := strings.Split(file, "\n")
	for i := range fl {
		indent, ok := strings.CutSuffix(fl[i], bl[0])
		if !ok || strings.Trim(indent, " ") != "" || i+len(bl) > len(fl) {
			continue
		}
		match := true
		for k, l := range bl {
			if f := fl[i+k]; f != indent+l && (l != "" || strings.TrimSpace(f) != "") {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// TestReadmeTokenBudgetSnippets checks every YAML snippet of the README's
// token-budget section: an excerpt must be found as it is in the file it
// names, and the others are checked below by name.
func TestReadmeTokenBudgetSnippets(t *testing.T) {
	checkSnippets(t, tokenBudgetSection, map[string]func(string) error{"estimate, then true up": trueUpProblem})
}

// TestReadmeLeasedBudgetSnippets checks every YAML snippet of the README's
// section on precision: cached, as TestReadmeTokenBudgetSnippets does.
func TestReadmeLeasedBudgetSnippets(t *testing.T) {
	checkSnippets(t, leasedSection, map[string]func(string) error{"cached rules": cachedRulesProblem})
}

// checkSnippets checks the YAML snippets of the README section that starts
// with heading: excerpts against their files, the others with checks by
// name, each of which must check one.
func checkSnippets(t *testing.T, heading string, checks map[string]func(string) error) {
	t.Helper()
	data, err := os.ReadFile(topReadme)
	if err != nil {
		t.Fatal(err)
	}
	snippets, err := readmeSnippets(string(data), heading)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, s := range snippets {
		m := snippetComment.FindStringSubmatch(s.comment)
		switch {
		case m == nil:
			t.Errorf("README.md:%d: a YAML snippet without <!-- excerpt of PATH --> or <!-- checked by envoy/readme_test.go: NAME --> before it", s.line)
		case m[2] != "":
			file, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(m[2])))
			if err != nil {
				t.Errorf("README.md:%d: %v", s.line, err)
			} else if !excerptOf(s.text, string(file)) {
				t.Errorf("README.md:%d: the snippet is not in %s as it is", s.line, m[2])
			}
		default:
			check := checks[m[3]]
			if check == nil {
				t.Errorf("README.md:%d: no check named %q", s.line, m[3])
				continue
			}
			seen[m[3]] = true
			if err := check(s.text); err != nil {
				t.Errorf("README.md:%d: %s: %v", s.line, m[3], err)
			}
		}
	}
	for name := range checks {
		if !seen[name] {
			t.Errorf("README.md: no snippet checked by %q", name)
		}
	}
}

// trueUpProblem checks the estimate-then-true-up recipe: a RateLimitPerRoute
// fragment whose request-time entry charges an estimate N, and whose
// stream-done entries refund N and report the usage, both marked
// tollgate.charge=always, all on the same actions.
func trueUpProblem(text string) error {
	var pr ratelimitv3.RateLimitPerRoute
	if err := envoytest.DecodeYAML([]byte(text), &pr); err != nil {
		return err
	}
	if err := envoytest.Validate(&pr); err != nil {
		return err
	}
	var estimate, refund, report *routev3.RateLimit
	for _, rl := range pr.GetRateLimits() {
		h := rl.GetHitsAddend()
		switch {
		case !rl.GetApplyOnStreamDone() && h.GetNumber().GetValue() > 0 && !h.GetIsNegativeHits():
			estimate = rl
		case rl.GetApplyOnStreamDone() && h.GetIsNegativeHits():
			refund = rl
		case rl.GetApplyOnStreamDone() && metadataHits.MatchString(h.GetFormat()):
			report = rl
		default:
			return fmt.Errorf("an entry that is neither the estimate, the refund nor the report: %v", rl)
		}
	}
	if estimate == nil || refund == nil || report == nil || len(pr.GetRateLimits()) != 3 {
		return errors.New("want three entries: the estimate, the refund and the report")
	}
	if n, r := estimate.GetHitsAddend().GetNumber().GetValue(), refund.GetHitsAddend().GetNumber().GetValue(); n != r {
		return fmt.Errorf("the refund is %d, the estimate %d", r, n)
	}
	for _, rl := range []*routev3.RateLimit{refund, report} {
		n := len(rl.GetActions())
		if n == 0 {
			return errors.New("a stream-done entry without actions")
		}
		gk := rl.GetActions()[n-1].GetGenericKey()
		if gk.GetDescriptorKey() != chargeKey || gk.GetDescriptorValue() != chargeAlways {
			return fmt.Errorf("a stream-done entry does not end with the generic_key %s=%s", chargeKey, chargeAlways)
		}
		if !equalActions(rl.GetActions()[:n-1], estimate.GetActions()) {
			return errors.New("a stream-done entry's actions, without the marker, are not the estimate's")
		}
	}
	return nil
}

// cachedRulesProblem checks the example of precision: cached: it loads,
// and its limits resolve to the precisions its comments give.
func cachedRulesProblem(text string) error {
	tree, err := descriptor.LoadFS(fstest.MapFS{"api.yaml": {Data: []byte(text)}}, descriptor.Options{})
	if err != nil {
		return err
	}
	d := tree.Domain("api")
	cached, strict := descriptor.PrecisionCached, descriptor.PrecisionStrict
	for entry, want := range map[string][]descriptor.Precision{
		"api_key": {cached, cached},
		"login":   {strict},
		"audit":   {strict},
	} {
		r := d.Match([]descriptor.Entry{{Key: entry, Value: "x"}})
		if r == nil || len(r.Limits) != len(want) {
			return fmt.Errorf("%s=x matches %v, want a rule of %d limits", entry, r, len(want))
		}
		for i, l := range r.Limits {
			if l.Precision != want[i] {
				return fmt.Errorf("%s=x: limit %d (%v) is %v, want %v", entry, i, l, l.Precision, want[i])
			}
		}
	}
	return nil
}

func equalActions(a, b []*routev3.RateLimit_Action) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// TestReadmeSnippetChecksCatch shows that the snippet checks above fail
// on a wrong recipe or a stale excerpt.
func TestReadmeSnippetChecksCatch(t *testing.T) {
	good := `rate_limits:
  - actions: [{generic_key: {descriptor_key: k, descriptor_value: v}}]
    hits_addend: {number: 10}
  - actions: [{generic_key: {descriptor_key: k, descriptor_value: v}}, {generic_key: {descriptor_key: tollgate.charge, descriptor_value: always}}]
    hits_addend: {number: 10, is_negative_hits: true}
    apply_on_stream_done: true
  - actions: [{generic_key: {descriptor_key: k, descriptor_value: v}}, {generic_key: {descriptor_key: tollgate.charge, descriptor_value: always}}]
    hits_addend: {format: "%DYNAMIC_METADATA(ns:key)%"}
    apply_on_stream_done: true`
	if err := trueUpProblem(good); err != nil {
		t.Fatalf("good recipe: %v", err)
	}
	tests := []struct{ name, old, new, want string }{
		{"refund differs", "{number: 10, is_negative", "{number: 9, is_negative", "the refund is 9, the estimate 10"},
		{"refund unmarked", "{generic_key: {descriptor_key: k, descriptor_value: v}}, {generic_key: {descriptor_key: tollgate.charge, descriptor_value: always}}]\n    hits_addend: {number: 10", "{generic_key: {descriptor_key: k, descriptor_value: v}}]\n    hits_addend: {number: 10", "does not end with the generic_key tollgate.charge=always"},
		{"no report", "    hits_addend: {format: \"%DYNAMIC_METADATA(ns:key)%\"}", "    hits_addend: {number: 5}", "neither the estimate, the refund nor the report"},
	}
	for _, tt := range tests {
		err := trueUpProblem(strings.Replace(good, tt.old, tt.new, 1))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	cachedGood := "domain: api\ndefaults: {precision: cached}\ndescriptors:\n" +
		"  - key: api_key\n    rate_limits:\n      - {unit: second, requests_per_unit: 1000}\n      - {unit: hour, requests_per_unit: 9, algorithm: fixed_window}\n" +
		"  - key: login\n    rate_limit: {unit: minute, requests_per_unit: 5, precision: strict}\n" +
		"  - key: audit\n    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_window_log}\n"
	if err := cachedRulesProblem(cachedGood); err != nil {
		t.Fatalf("good cached rules: %v", err)
	}
	if err := cachedRulesProblem(strings.Replace(cachedGood, "precision: strict", "precision: cached", 1)); err == nil || !strings.Contains(err.Error(), "login=x: limit 0") {
		t.Errorf("a cached login rule: got %v, want an error about login=x", err)
	}
	file := "a:\n  b:\n    c: 1\n    d: 2\n"
	for block, want := range map[string]bool{"c: 1\nd: 2": true, "b:\n  c: 1": true, "c: 1\nd: 3": false, "c: 1\n  d: 2": false} {
		if got := excerptOf(block, file); got != want {
			t.Errorf("excerptOf(%q) = %v, want %v", block, got, want)
		}
	}
}
