package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBinary builds tollgate with the version and revision stamped by the
// linker, as `make build` stamps them (without -trimpath, so that the
// build reuses the packages go test compiled), and runs it: what it prints, and the exit
// codes that only main passes to the operating system.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build with: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "tollgate")
	const pkg = "github.com/tollgatehq/tollgate/pkg/version"
	build := exec.Command(gobin, "build",
		"-ldflags", "-X "+pkg+".Version=v9.8.7-test -X "+pkg+".Revision=0123abc",
		"-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	tests := []struct {
		args   []string
		code   int
		stdout string // a pattern of the whole stdout
		stderr string // a pattern of the whole stderr
	}{
		{[]string{"version"}, 0, `tollgate v9\.8\.7-test\nrevision: 0123abc\ngo: go1\.\d+[^\n]*\n`, ``},
		{[]string{"--help"}, 0, `(?s).*\nAvailable Commands:\n.*  serve +Serve the RateLimitService.*`, ``},
		{[]string{"frobnicate"}, 2, ``, `tollgate: unknown command "frobnicate" for "tollgate"\n(?s).*`},
		{[]string{"check", "/nonexistent"}, 1, ``, `tollgate check: .*/nonexistent.*\n`},
		{[]string{"--no-such-flag"}, 2, ``, `tollgate serve: usage: unknown flag: --no-such-flag\n`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tt.code, stderr.String())
			}
			if !regexp.MustCompile(`^` + tt.stdout + `$`).MatchString(stdout.String()) {
				t.Errorf("stdout %q does not match %q", stdout.String(), tt.stdout)
			}
			if !regexp.MustCompile(`^` + tt.stderr + `$`).MatchString(stderr.String()) {
				t.Errorf("stderr %q does not match %q", stderr.String(), tt.stderr)
			}
		})
	}
}
