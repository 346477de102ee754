package cli

import (
	"bytes"
	"context"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/polltest"
)

// runMain runs the command line with an empty environment.
func runMain(args ...string) (code int, stdout, stderr string) {
	return runEnv(context.Background(), nil, args...)
}

// runEnv runs the command line with the environment env.
func runEnv(ctx context.Context, env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(ctx, args, &out, &errOut, func(k string) string { return env[k] })
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

// TestCheckValuesFiles checks that check reads the values files the rules
// name, counts them, and reports a bad line with its file and line; and
// that explain names the file and line a value comes from.
func TestCheckValuesFiles(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"keys.yaml":         "domain: keys\ndescriptors:\n  - key: api_key\n    values_file: lists/revoked.txt\n    action: deny\n",
		"lists/revoked.txt": "# revoked\nk1\nk2\nsk_old_*\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runMain("check", dir)
	if code != 0 || !strings.HasPrefix(out, "ok: 1 domains, 1 values file, hash ") {
		t.Fatalf("check: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = runMain("explain", dir, "--domain", "keys", "--descriptor", "api_key=sk_old_7")
	want := "  1. api_key=sk_old_7: wildcard \"sk_old_*\" -> api_key in lists/revoked.txt (" + filepath.Join(dir, "lists", "revoked.txt") + " line 4)\n"
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("explain: exit %d\nstdout: %s\nstderr: %s\nwant a line %q", code, out, errOut, want)
	}

	apptest.WriteFile(t, filepath.Join(dir, "lists", "revoked.txt"), "k1\nk2\nk1\n")
	code, _, errOut = runMain("check", dir)
	want = filepath.Join(dir, "lists", "revoked.txt") + `:3: api_key in lists/revoked.txt: duplicate value "k1" (first at line 1)`
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("check of a bad list: exit %d, stderr %s; want exit 1 and %s", code, errOut, want)
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
		{[]string{"frobnicate"}, 2, `tollgate: unknown command "frobnicate" for "tollgate"`},
		{[]string{"serv"}, 2, "Did you mean this?\n\tserve\n"},
		{[]string{"check", "a", "b"}, 2, "want at most one configuration directory, got 2 arguments"},
		{[]string{"check"}, 1, "loading descriptors from config: "},
		{[]string{"check", "../../config-examples", "--failure-mode", "maybe"}, 1, `failure-mode: unknown failure mode "maybe"`},
		{[]string{"explain", "../../config-examples", "--domain", "tiers", "--descriptor", "novalue"}, 2, `entry "novalue" is not key=value`},
		{[]string{"query", "--domain", "x"}, 2, "--domain and at least one --descriptor are required"},
		{[]string{"serve", "--store", "etcd"}, 1, `unknown store "etcd"`},
		{[]string{"serve", "--no-such-flag"}, 2, "tollgate serve: usage: unknown flag: --no-such-flag\n"},
		{[]string{"--no-such-flag"}, 2, "tollgate serve: usage: unknown flag: --no-such-flag\n"},
		{[]string{"--store", "etcd"}, 1, `tollgate serve: store: unknown store "etcd"`},
		{[]string{"serve", "extra"}, 2, "tollgate serve: usage: unexpected arguments [\"extra\"]\n"},
		{[]string{"check", "--max-patterns", "many"}, 2, `tollgate check: usage: invalid argument "many" for "--max-patterns" flag`},
		{[]string{"query", "extra"}, 2, "tollgate query: usage: unexpected arguments [\"extra\"]\n"},
		{[]string{"version", "extra"}, 2, "tollgate version: usage: unexpected arguments [\"extra\"]\n"},
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

// TestCheckJudgesAsServe gives check and serve the same environment and
// flags and wants the same verdict from both: both accept the
// configuration (serve then stops at once, its context being done), or
// both reject it with the same error.
func TestCheckJudgesAsServe(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"burst.yaml": "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, burst: 5}\n",
		"lists.yaml": "domain: l\ndescriptors:\n  - key: k\n    value: a*\n    action: deny\n  - key: k\n    value: b*\n    action: allow\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	settingsFile := filepath.Join(t.TempDir(), "tollgate.yaml")
	if err := os.WriteFile(settingsFile, []byte("default-algorithm: fixed_window\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	burstErr := "burst.yaml:4: k: rate_limit: burst applies only to token_bucket, not fixed_window (the algorithm comes from the service's default)"
	patternsErr := `lists.yaml:6: k=b*: more than 1 wildcard values of key "k" at one level: a request tries them in turn (Options.MaxPatterns)`
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string // the error, "" when the configuration is accepted
	}{
		{name: "defaults"},
		{name: "default algorithm from the environment", env: map[string]string{"TOLLGATE_DEFAULT_ALGORITHM": "fixed_window"}, want: burstErr},
		{name: "default algorithm from the settings file", args: []string{"--settings", settingsFile}, want: burstErr},
		{name: "default algorithm flag", args: []string{"--default-algorithm", "fixed_window"}, want: burstErr},
		{
			name: "flag over environment",
			env:  map[string]string{"TOLLGATE_DEFAULT_ALGORITHM": "fixed_window"},
			args: []string{"--default-algorithm", "token_bucket"},
		},
		{name: "failure mode flag", args: []string{"--failure-mode", "closed"}},
		{name: "bad failure mode flag", args: []string{"--failure-mode", "maybe"}, want: `failure-mode: unknown failure mode "maybe" (want open, closed or local)`},
		{name: "bad failure mode from the environment", env: map[string]string{"TOLLGATE_FAILURE_MODE": "maybe"}, want: `failure-mode: unknown failure mode "maybe" (want open, closed or local)`},
		{name: "max patterns from the environment", env: map[string]string{"TOLLGATE_MAX_PATTERNS": "1"}, want: patternsErr},
		{name: "max patterns flag", args: []string{"--max-patterns", "1"}, want: patternsErr},
		{name: "max patterns out of range", env: map[string]string{"TOLLGATE_MAX_PATTERNS": "0"}, want: "max-patterns: must be positive, got 0"},
		{name: "a setting only serve uses", env: map[string]string{"TOLLGATE_STORE": "etcd"}, want: `store: unknown store "etcd" (want memory or redis)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{
				"TOLLGATE_CONFIG_DIR": dir,
				"TOLLGATE_GRPC_ADDR":  "127.0.0.1:0",
				"TOLLGATE_HTTP_ADDR":  "127.0.0.1:0",
				"TOLLGATE_DEBUG_ADDR": "127.0.0.1:0",
				"TOLLGATE_LOG_LEVEL":  "error",
			}
			maps.Copy(env, tt.env)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			verdicts := map[string]string{}
			for _, cmd := range []string{"serve", "check"} {
				code, _, errOut := runEnv(ctx, env, append([]string{cmd}, tt.args...)...)
				prefix := "tollgate " + cmd + ": "
				_, got, failed := strings.Cut(errOut, prefix)
				switch {
				case tt.want == "" && (code != 0 || failed):
					t.Fatalf("%s: exit %d, stderr %q; want it to accept the configuration", cmd, code, errOut)
				case tt.want != "" && (code != 1 || !strings.Contains(got, tt.want)):
					t.Fatalf("%s: exit %d, stderr %q; want exit 1 and an error containing %q", cmd, code, errOut, tt.want)
				}
				verdicts[cmd] = got
			}
			if verdicts["serve"] != verdicts["check"] {
				t.Errorf("serve and check disagree:\nserve: %q\ncheck: %q", verdicts["serve"], verdicts["check"])
			}
		})
	}
}

// TestExplainShowsChargeAndPrecision checks that explain names a limit's
// charge when it is always and its precision when it is cached, and that
// it takes the default charge and precision serve would.
func TestExplainShowsChargeAndPrecision(t *testing.T) {
	args := []string{"explain", "../../config-examples", "--domain", "tiers", "--descriptor", "tier=free,api_key=k"}
	tests := []struct {
		name    string
		extra   []string
		env     map[string]string
		want    string // how stdout ends
		wantErr string // what stderr holds when explain fails
	}{
		{name: "default", want: "100 per minute, token_bucket\n"},
		{name: "charge flag", extra: []string{"--default-charge", "always"}, want: "100 per minute, token_bucket, charge always\n"},
		{name: "charge environment", env: map[string]string{"TOLLGATE_DEFAULT_CHARGE": "always"}, want: "100 per minute, token_bucket, charge always\n"},
		{name: "xds", env: map[string]string{"TOLLGATE_CONFIG_TYPE": "xds"}, want: "100 per minute, token_bucket, charge always\n"},
		{name: "ratelimit's environment", env: map[string]string{"RUNTIME_ROOT": "/srv"}, want: "100 per minute, fixed_window, charge always\n"},
		{name: "precision flag", extra: []string{"--precision", "cached"}, want: "100 per minute, token_bucket, precision cached\n"},
		{name: "precision environment", env: map[string]string{"TOLLGATE_PRECISION": "CACHED"}, want: "100 per minute, token_bucket, precision cached\n"},
		{name: "bad precision flag", extra: []string{"--precision", "loose"}, wantErr: `precision: unknown precision "loose" (want strict or cached)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runEnv(context.Background(), tt.env, append(args, tt.extra...)...)
			if tt.wantErr != "" {
				if code == 0 || !strings.Contains(errOut, tt.wantErr) {
					t.Errorf("exit %d, stderr %q; want a failure naming %q", code, errOut, tt.wantErr)
				}
				return
			}
			if code != 0 || !strings.HasSuffix(out, tt.want) {
				t.Errorf("exit %d, stdout ending %q:\n%s\nstderr: %s", code, tt.want, out, errOut)
			}
		})
	}
}

// TestServeReloadsOnSIGHUP sends the process a SIGHUP while serve runs and
// checks that serve logs it and reloads the rules.
func TestServeReloadsOnSIGHUP(t *testing.T) {
	logs := &logtest.Buffer{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		done <- MainEnv(ctx, []string{"serve", "--config-dir", "../../config-examples", "--log-level", "debug",
			"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", ""}, io.Discard, logs, func(string) string { return "" })
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d:\n%s", code, logs)
		}
	})
	// serve listens for SIGHUP before it starts serving.
	polltest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "tollgate serving") },
		"serve did not start:\n%s", logs)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(logs.String(), `msg="descriptor configuration unchanged" component=reload dir=../../config-examples reason=trigger`)
	}, "no reload after SIGHUP:\n%s", logs)
	if !strings.Contains(logs.String(), "SIGHUP: reloading descriptor configuration") {
		t.Errorf("SIGHUP not logged:\n%s", logs)
	}
}

// TestCheckShadowRules checks that check judges --shadow-config-dir too:
// a broken shadow file fails it with its file and line.
func TestCheckShadowRules(t *testing.T) {
	shadow := t.TempDir()
	path := filepath.Join(shadow, "api.yaml")
	if err := os.WriteFile(path, []byte("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runMain("check", "../../config-examples", "--shadow-config-dir", shadow)
	if code != 0 || !strings.Contains(out, "shadow rules ok: 1 domains") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if err := os.WriteFile(path, []byte("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runMain("check", "../../config-examples", "--shadow-config-dir", shadow)
	if code != 1 || !strings.Contains(errOut, "shadow rules (--shadow-config-dir") || !strings.Contains(errOut, "api.yaml:4") {
		t.Fatalf("exit %d, stderr %q; want 1 naming the shadow file and line", code, errOut)
	}
}
