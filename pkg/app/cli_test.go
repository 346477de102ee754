package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runMain(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = Main(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCheckExamples(t *testing.T) {
	code, out, errOut := runMain("check", "../../config-examples")
	if code != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Fatalf("check config-examples: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

func TestCheckReportsEveryError(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a.yaml": "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
		"b.yaml": "domain: b\ndescriptors:\n  - key: k\n    surprise: true\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, _, errOut := runMain("check", dir)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr: %s", code, errOut)
	}
	for _, want := range []string{"a.yaml:4", "fortnight", "b.yaml:4", "surprise"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

func TestExplain(t *testing.T) {
	code, out, errOut := runMain("explain", "../../config-examples", "--domain", "tiers", "--descriptor", "tier=free")
	if code != 0 || !strings.Contains(out, "tier") || !strings.Contains(out, "exact") {
		t.Fatalf("explain: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, _, errOut = runMain("explain", "../../config-examples", "--domain", "nope", "--descriptor", "a=b")
	if code != 1 || !strings.Contains(errOut, `domain "nope" is not configured`) {
		t.Fatalf("explain of an unknown domain: exit %d, stderr %s", code, errOut)
	}
}

func TestExplainTakesServeSettings(t *testing.T) {
	args := []string{"explain", "../../config-examples", "--domain", "tiers", "--descriptor", "tier=free,api_key=k"}
	_, out, _ := runMain(args...)
	if !strings.Contains(out, "failure_mode=open") {
		t.Fatalf("explain without --failure-mode:\n%s", out)
	}
	_, out, _ = runMain(append(args, "--failure-mode", "closed")...)
	if !strings.Contains(out, "failure_mode=closed") {
		t.Errorf("explain --failure-mode closed:\n%s", out)
	}
	code, _, errOut := runMain("check", "../../config-examples", "--max-patterns", "1")
	if code != 1 || !strings.Contains(errOut, "more than 1 wildcard values") {
		t.Errorf("check --max-patterns 1: exit %d, stderr %s", code, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"check"}, 2, "want exactly one configuration directory"},
		{[]string{"check", "../../config-examples", "--failure-mode", "maybe"}, 2, `failure-mode: unknown failure mode "maybe"`},
		{[]string{"explain", "../../config-examples", "--domain", "tiers", "--descriptor", "novalue"}, 2, `entry "novalue" is not key=value`},
		{[]string{"query", "--domain", "x"}, 2, "--domain and at least one --descriptor are required"},
		{[]string{"serve", "--store", "etcd"}, 1, `unknown store "etcd"`},
		{[]string{"serve", "--no-such-flag"}, 1, "unknown flag: --no-such-flag"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, errOut := runMain(tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d containing %q", code, errOut, tt.code, tt.want)
			}
		})
	}
}
