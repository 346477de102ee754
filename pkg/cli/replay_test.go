package cli

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The README's replay examples name these paths; the tests run them on
// testdata/replay: a recording of 120 calls made through tollgate serve
// on rules-live/, and rules/, a lower limit without the endpoint rule.
var replayPaths = map[string]string{
	"calls.jsonl": "testdata/replay/traffic.jsonl",
	"rules/":      "testdata/replay/after",
	"rules-live/": "testdata/replay/before",
}

// readmeSection returns the README's section under heading, up to the
// next heading of its level or above.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q", heading)
	}
	level := strings.Fields(heading)[0]
	if i := regexp.MustCompile(`\n#{1,` + fmt.Sprint(len(level)) + `} `).FindStringIndex(rest); i != nil {
		rest = rest[:i[0]]
	}
	return rest
}

// fences returns the code blocks of text in order, each with its
// language.
func fences(text string) (langs, blocks []string) {
	for _, m := range regexp.MustCompile("(?s)```(\\w+)\n(.*?)```").FindAllStringSubmatch(text, -1) {
		langs, blocks = append(langs, m[1]), append(blocks, m[2])
	}
	return langs, blocks
}

// replayArgs returns the arguments of the tollgate replay command line
// cmd (backslash continuations joined), its paths mapped by paths.
func replayArgs(t *testing.T, cmd string, paths map[string]string) []string {
	t.Helper()
	args := strings.Fields(strings.ReplaceAll(cmd, "\\\n", " "))
	if len(args) < 2 || args[0] != "tollgate" || args[1] != "replay" {
		t.Fatalf("not a tollgate replay command: %q", cmd)
	}
	args = args[1:]
	for i, a := range args {
		if p, ok := paths[a]; ok {
			args[i] = p
		}
	}
	return args
}

// TestReadmeReplay runs the README's replay commands on the recording
// they describe and compares what they print with the README's.
func TestReadmeReplay(t *testing.T) {
	langs, blocks := fences(readmeSection(t, "### Replaying traffic"))
	ran := 0
	for i, b := range blocks {
		if langs[i] != "sh" || !strings.HasPrefix(b, "tollgate replay") {
			continue
		}
		if i+1 >= len(blocks) || langs[i+1] != "text" {
			t.Fatalf("the command %q is not followed by its output", b)
		}
		code, out, errOut := runMain(replayArgs(t, strings.TrimSpace(b), replayPaths)...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", b, code, errOut)
		}
		// The last line of a report says how fast it went.
		want, got := blocks[i+1], out
		if strings.HasSuffix(want, " decisions in …\n") {
			want = strings.TrimSuffix(want, "…\n")
			got = regexp.MustCompile(`(?m) decisions in .*\n\z`).ReplaceAllString(got, " decisions in ")
		}
		if got != want {
			t.Errorf("%s printed\n%s\nthe README shows\n%s", b, got, want)
		}
		ran++
	}
	if ran != 2 {
		t.Fatalf("ran %d commands of the README, want the report and the sweep", ran)
	}
}

// githubWorkflow is the part of a GitHub Actions workflow the README's
// example uses; decoding refuses any other field.
type githubWorkflow struct {
	Name string `yaml:"name"`
	On   struct {
		PullRequest struct {
			Paths []string `yaml:"paths"`
		} `yaml:"pull_request"`
	} `yaml:"on"`
	Jobs map[string]struct {
		RunsOn string `yaml:"runs-on"`
		Steps  []struct {
			Name string            `yaml:"name"`
			Uses string            `yaml:"uses"`
			Run  string            `yaml:"run"`
			With map[string]string `yaml:"with"`
			Env  map[string]string `yaml:"env"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

// gitlabJob is one job of a .gitlab-ci.yml, as far as the README's example
// uses it.
type gitlabJob struct {
	Image string `yaml:"image"`
	Rules []struct {
		Changes []string `yaml:"changes"`
	} `yaml:"rules"`
	Script []string `yaml:"script"`
}

func decodeStrict(t *testing.T, text string, v any) {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%v in\n%s", err, text)
	}
}

// TestReadmeReplayPipelines decodes the README's CI examples and runs
// their replay command: on a change that newly rejects a sixth of the
// recorded calls it fails, with the message the README quotes, and on
// the recorded rules it passes. The pipelines watch the directory the
// command replays, and install Go of go.mod's version.
func TestReadmeReplayPipelines(t *testing.T) {
	section := readmeSection(t, "### Replaying traffic")
	langs, blocks := fences(section)
	var yamls []string
	for i, b := range blocks {
		if langs[i] == "yaml" {
			yamls = append(yamls, b)
		}
	}
	if len(yamls) != 2 {
		t.Fatalf("%d YAML examples, want GitHub Actions' and GitLab's", len(yamls))
	}
	goMod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(goMod))[1]

	var gh githubWorkflow
	decodeStrict(t, yamls[0], &gh)
	var ghCommand, ghGo string
	for _, job := range gh.Jobs {
		for _, s := range job.Steps {
			if strings.HasPrefix(s.Run, "tollgate replay") {
				ghCommand = s.Run
			}
			if strings.HasPrefix(s.Uses, "actions/setup-go@") {
				ghGo = s.With["go-version"]
			}
		}
	}
	var gl map[string]gitlabJob
	decodeStrict(t, yamls[1], &gl)
	var glCommand, glImage string
	var glChanges []string
	for _, job := range gl {
		for _, line := range job.Script {
			if strings.HasPrefix(line, "tollgate replay") {
				glCommand, glImage = line, job.Image
				for _, r := range job.Rules {
					glChanges = append(glChanges, r.Changes...)
				}
			}
		}
	}
	if ghCommand == "" || glCommand == "" {
		t.Fatalf("no tollgate replay step: GitHub %q, GitLab %q", ghCommand, glCommand)
	}
	if ghGo != goVersion || glImage != "golang:"+goVersion {
		t.Errorf("the pipelines install Go %q and %q; go.mod says %s", ghGo, glImage, goVersion)
	}

	_, gate, _ := strings.Cut(section, "(`tollgate replay: ")
	gate, _, _ = strings.Cut(gate, "`)")
	gate = "tollgate replay: " + strings.Join(strings.Fields(gate), " ")
	for _, pipeline := range []struct {
		name, command string
		watched       []string
	}{{"GitHub Actions", ghCommand, gh.On.PullRequest.Paths}, {"GitLab", glCommand, glChanges}} {
		args := replayArgs(t, pipeline.command, nil)
		dir := ""
		for i, a := range args {
			if a == "--config-dir" && i+1 < len(args) {
				dir = args[i+1]
			}
		}
		watched := false
		for _, glob := range pipeline.watched {
			watched = watched || strings.HasPrefix(path.Clean(strings.TrimSuffix(glob, "**/*")), path.Clean(strings.TrimSuffix(dir, "/")))
		}
		if dir == "" || !watched {
			t.Errorf("%s replays --config-dir %q but runs on changes to %q", pipeline.name, dir, pipeline.watched)
		}
		for _, rules := range []struct {
			dir  string
			code int
		}{{"testdata/replay/after", 1}, {"testdata/replay/before", 0}} {
			code, _, errOut := runMain(replayArgs(t, pipeline.command, map[string]string{
				"calls.jsonl": "testdata/replay/traffic.jsonl", dir: rules.dir})...)
			if code != rules.code {
				t.Errorf("%s on %s: exit %d, want %d: %s", pipeline.name, rules.dir, code, rules.code, errOut)
			}
			if rules.code == 1 && strings.TrimSpace(errOut) != gate {
				t.Errorf("%s on %s says\n%s\nthe README quotes\n%s", pipeline.name, rules.dir, errOut, gate)
			}
		}
	}
}

// TestReplayFlags checks the flags a replay refuses before reading
// anything.
func TestReplayFlags(t *testing.T) {
	traffic := filepath.Join("testdata", "replay", "traffic.jsonl")
	for _, tt := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"replay"}, 2, "--traffic names the recording files"},
		{[]string{"replay", "--traffic", traffic, "dir"}, 2, "replay takes no arguments"},
		{[]string{"replay", "--traffic", traffic, "--scale", "0"}, 2, "--scale must be above 0"},
		{[]string{"replay", "--traffic", traffic, "--sweep-field", "burst"}, 2, "a sweep takes --sweep-domain"},
		{[]string{"replay", "--traffic", traffic, "--sweep-domain", "api", "--sweep-rule", "client", "--sweep-field", "unit", "--sweep-values", "1"}, 2, `--sweep-field "unit"`},
		{[]string{"replay", "--traffic", traffic, "--sweep-domain", "api", "--sweep-rule", "client", "--sweep-field", "burst", "--sweep-values", "1,x"}, 2, `--sweep-values: "x"`},
		{[]string{"replay", "--traffic", "missing.jsonl", "--config-dir", "testdata/replay/after"}, 1, "open missing.jsonl: no such file or directory"},
		{[]string{"replay", "--traffic", "../../README.md", "--config-dir", "testdata/replay/after"}, 1, "../../README.md: line 1: not a JSON object"},
		{[]string{"replay", "--traffic", traffic, "--config-dir", "testdata/replay/after", "--baseline-dir", "missing"}, 1, "--baseline-dir: stat missing"},
	} {
		code, _, errOut := runMain(tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.err) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tt.args, code, errOut, tt.code, tt.err)
		}
	}
	// The JSON report is the text report's numbers.
	code, out, errOut := runMain("replay", "--traffic", traffic, "--config-dir", "testdata/replay/after", "--json")
	if code != 0 || !bytes.Contains([]byte(out), []byte(`"newly_rejected": 20`)) {
		t.Errorf("--json: exit %d, %s%s", code, out, errOut)
	}
}
