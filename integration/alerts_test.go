package integration

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/prometheus/common/model"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
)

// alertsFile holds tollgate's Prometheus alerting rules.
const alertsFile = "../envoy/observability/alerts.yml"

// alertRules is the part of Prometheus's rule file format the alerts use,
// decoded strictly so that a misspelt field fails.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// seriesLabel matches one label of a series in the text exposition.
var seriesLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// isNameByte reports whether c may be part of a metric or label name.
func isNameByte(c byte) bool {
	return c == '_' || c == ':' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// equalitySelectors returns, for each selector of expr with label
// matchers, its metric name and matchers. A matcher other than =, or a
// selector without a name, is an error: the test could not check what it
// selects.
func equalitySelectors(expr string) (map[string][]map[string]string, error) {
	out := map[string][]map[string]string{}
	skipSpace := func(i int) int {
		for i < len(expr) && strings.ContainsRune(" \t\n", rune(expr[i])) {
			i++
		}
		return i
	}
	for i := 0; i < len(expr); i++ {
		switch expr[i] {
		case '"', '\'', '`':
			end := strings.IndexByte(expr[i+1:], expr[i])
			if end < 0 {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			i += 1 + end
			continue
		case '{':
		default:
			continue
		}
		j := i
		for j > 0 && expr[j-1] == ' ' {
			j--
		}
		k := j
		for k > 0 && isNameByte(expr[k-1]) {
			k--
		}
		if k == j {
			return nil, fmt.Errorf("a selector without a metric name at %d", i)
		}
		name, matchers := expr[k:j], map[string]string{}
		for i = skipSpace(i + 1); i < len(expr) && expr[i] != '}'; i = skipSpace(i) {
			l := i
			for i < len(expr) && isNameByte(expr[i]) {
				i++
			}
			label := expr[l:i]
			i = skipSpace(i)
			op := i
			for i < len(expr) && strings.IndexByte("=!~", expr[i]) >= 0 {
				i++
			}
			if expr[op:i] != "=" {
				return nil, fmt.Errorf("%s: matcher %s%s: only = is checked", name, label, expr[op:i])
			}
			i = skipSpace(i)
			if i >= len(expr) || expr[i] != '"' {
				return nil, fmt.Errorf("%s: matcher %s: want a double-quoted value", name, label)
			}
			end := i + 1
			for end < len(expr) && expr[end] != '"' {
				if expr[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(expr) {
				return nil, fmt.Errorf("%s: matcher %s: unterminated value", name, label)
			}
			value, err := strconv.Unquote(expr[i : end+1])
			if err != nil {
				return nil, fmt.Errorf("%s: matcher %s: %w", name, label, err)
			}
			matchers[label] = value
			if i = skipSpace(end + 1); i < len(expr) && expr[i] == ',' {
				i++
			}
		}
		out[name] = append(out[name], matchers)
	}
	return out, nil
}

// balanced reports whether the brackets of expr, outside strings, pair up.
func balanced(expr string) bool {
	var open []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	for _, c := range promqlStrings.ReplaceAllString(expr, `""`) {
		switch c {
		case '(', '[', '{':
			open = append(open, c)
		case ')', ']', '}':
			if len(open) == 0 || open[len(open)-1] != pairs[c] {
				return false
			}
			open = open[:len(open)-1]
		}
	}
	return len(open) == 0
}

// exposedSeries returns the label sets of the series of each metric in a
// Prometheus text exposition.
func exposedSeries(exposition string) map[string][]map[string]string {
	out := map[string][]map[string]string{}
	for line := range strings.Lines(exposition) {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		labels := map[string]string{}
		if rest != "" {
			set, _, _ := strings.Cut(rest, "}")
			for _, l := range seriesLabel.FindAllStringSubmatch(set, -1) {
				labels[l[1]] = l[2]
			}
		} else {
			name, _, _ = strings.Cut(line, " ")
		}
		out[name] = append(out[name], labels)
	}
	return out
}

// matches reports whether one of series has every label of matchers.
func matches(series []map[string]string, matchers map[string]string) bool {
	for _, labels := range series {
		ok := true
		for k, v := range matchers {
			ok = ok && labels[k] == v
		}
		if ok {
			return true
		}
	}
	return false
}

// promTemplatePreamble is what Prometheus puts before an alert's label and
// annotation templates, so that they can name $labels and $value.
const promTemplatePreamble = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"

// TestAlertRules decodes tollgate's alerting rules strictly, checks each
// rule's form (duration, severity, templates, brackets), requires a
// fail-open alert and a breaker alert, and runs tollgate with its Redis down
// until it decides without it: every metric the rules name must then be
// exported, and every selector with label matchers must select a series.
func TestAlertRules(t *testing.T) {
	var rules alertRules
	decodeStrict(t, alertsFile, &rules)

	srv := redistest.StartStandalone(t)
	srv.Kill()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "api.yaml"), searchRules)
	svc := startServiceIn(t, dir, func(s *app.Settings) {
		s.Store, s.Redis.Addrs, s.Failure.BreakerFailures = "redis", []string{srv.Addr}, 1
	})
	polltest.EventuallyEvery(t, 10*time.Second, pollEvery, func() bool {
		svc.query(t, "api", entries("api_key", "k1", "endpoint", "/search"))
		m := svc.get(t, svc.httpAddr, "/metrics")
		return strings.Contains(m, `result="degraded"`) && strings.Contains(m, `tollgate_breaker_state{breaker="redis"} 2`)
	}, "tollgate to decide without Redis, its breaker open")
	exported := exposedSeries(svc.get(t, svc.httpAddr, "/metrics"))

	// Over every rule: the selectors with matchers, the metrics named, the
	// alerts' names.
	selects := map[string][]map[string]string{}
	usedNames, names := map[string]bool{}, map[string]bool{}
	for _, g := range rules.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("%s: group %q: want a name and rules", alertsFile, g.Name)
		}
		for _, r := range g.Rules {
			where := fmt.Sprintf("%s: alert %q", alertsFile, r.Alert)
			if r.Alert == "" || names[r.Alert] {
				t.Errorf("%s: want a name of its own", where)
			}
			names[r.Alert] = true
			if _, err := model.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for: %v", where, err)
			}
			if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", where, sev)
			}
			for _, a := range []string{"summary", "description"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s", where, a)
				}
			}
			for k, text := range r.Annotations {
				tmpl, err := template.New(k).Option("missingkey=zero").Parse(promTemplatePreamble + text)
				if err == nil {
					err = tmpl.Execute(&strings.Builder{}, struct {
						Labels, ExternalLabels map[string]string
						ExternalURL            string
						Value                  float64
					}{Labels: map[string]string{"instance": "tollgate:8080"}, Value: 1.5})
				}
				if err != nil {
					t.Errorf("%s: annotation %s: %v", where, k, err)
				}
			}
			if !balanced(r.Expr) {
				t.Errorf("%s: the brackets of %q do not pair up", where, r.Expr)
			}
			used := metricNames(r.Expr)
			if len(used) == 0 {
				t.Errorf("%s: %q names no metric", where, r.Expr)
			}
			for _, name := range used {
				usedNames[name] = true
				if _, ok := exported[name]; !ok {
					t.Errorf("%s: %q names %s, which tollgate does not export", where, r.Expr, name)
				}
			}
			sel, err := equalitySelectors(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", where, err)
			}
			for name, all := range sel {
				for _, m := range all {
					if !matches(exported[name], m) {
						t.Errorf("%s: %s%v selects no series tollgate exports without Redis", where, name, m)
					}
					selects[name] = append(selects[name], m)
				}
			}
		}
	}
	if t.Failed() {
		t.Logf("tollgate exports: %s", strings.Join(slices.Sorted(maps.Keys(exported)), " "))
	}
	// The two alerts the file is for: decisions made without Redis
	// (fail-open, by default), and the breaker open.
	if !slices.ContainsFunc(selects["tollgate_decisions_total"], func(m map[string]string) bool { return m["result"] == "degraded" }) {
		t.Errorf("%s: no alert selects tollgate_decisions_total{result=\"degraded\"}", alertsFile)
	}
	if !usedNames["tollgate_breaker_state"] {
		t.Errorf("%s: no alert on tollgate_breaker_state", alertsFile)
	}
}

func TestEqualitySelectors(t *testing.T) {
	got, err := equalitySelectors(`sum by (a) (rate(x_total{result="degraded", b="{}"}[5m])) > 0 and y{c="d"} == 2 or z`)
	want := map[string][]map[string]string{"x_total": {{"result": "degraded", "b": "{}"}}, "y": {{"c": "d"}}}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("equalitySelectors = %v, %v; want %v", got, err, want)
	}
	for _, expr := range []string{`x{a=~"b.*"}`, `x{a!="b"}`, `{__name__="x"}`, `x{a="b}`} {
		if _, err := equalitySelectors(expr); err == nil {
			t.Errorf("equalitySelectors(%q) passed", expr)
		}
	}
	for expr, want := range map[string]bool{`a{b="(]"}[5m]`: true, `(a`: false, `a[5m)`: false, `sum(a) by (b)`: true} {
		if got := balanced(expr); got != want {
			t.Errorf("balanced(%q) = %v, want %v", expr, got, want)
		}
	}
}
