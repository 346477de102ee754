package cli

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/version"
)

// commands are the commands that `tollgate help` must list.
var commands = []string{"admin", "bench", "check", "completion", "explain", "health", "help", "query", "replay", "schema", "serve", "top", "version"}

// listedCommands returns the commands that help output lists under
// "Available Commands:", one line each.
func listedCommands(t *testing.T, help string) []string {
	t.Helper()
	_, list, ok := strings.Cut(help, "Available Commands:\n")
	if !ok {
		t.Fatalf("help lists no commands:\n%s", help)
	}
	list, _, _ = strings.Cut(list, "\n\n")
	var names []string
	line := regexp.MustCompile(`^  ([a-z]+) +\S.*$`)
	for l := range strings.Lines(list) {
		m := line.FindStringSubmatch(strings.TrimSuffix(l, "\n"))
		if m == nil {
			t.Fatalf("help lists a command on more than one line, or without a description: %q", l)
		}
		names = append(names, m[1])
	}
	return names
}

func TestHelpListsEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := runMain(args...)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if got := listedCommands(t, out); !slices.Equal(got, commands) {
				t.Errorf("help lists %q, want %q", got, commands)
			}
		})
	}
}

func TestCommandHelp(t *testing.T) {
	for _, cmd := range commands {
		for _, args := range [][]string{{cmd, "--help"}, {"help", cmd}} {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				code, out, errOut := runMain(args...)
				if code != 0 || errOut != "" {
					t.Fatalf("exit %d, stderr %q", code, errOut)
				}
				if want := "Usage:\n  tollgate " + cmd; !strings.Contains(out, want) {
					t.Errorf("help lacks %q:\n%s", want, out)
				}
			})
		}
	}
}

// TestServeHelpListsEverySetting holds `tollgate serve --help`, which
// deployment tests read flag names from, to list every setting as
// --flag-name; check and explain, which take the same settings, too.
func TestServeHelpListsEverySetting(t *testing.T) {
	var names []string
	app.Flags(pflag.NewFlagSet("tollgate serve", pflag.ContinueOnError)).VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	if len(names) < 40 {
		t.Fatalf("only %d settings flags: %q", len(names), names)
	}
	for _, cmd := range []string{"serve", "check", "explain"} {
		_, out, _ := runMain(cmd, "--help")
		for _, name := range names {
			if !regexp.MustCompile(`(?m)^ +--` + name + `\b`).MatchString(out) {
				t.Errorf("%s --help does not list --%s", cmd, name)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	b := version.Read()
	want := "tollgate " + b.Version + "\nrevision: " + b.Revision + "\ngo: " + b.GoVersion + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := runMain(args...)
		if code != 0 || out != want || errOut != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 0, stdout %q", args[0], code, out, errOut, want)
		}
	}
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			code, out, errOut := runMain("completion", shell)
			if code != 0 || errOut != "" || !strings.Contains(out, "tollgate") {
				t.Fatalf("exit %d, stderr %q, %d bytes of script", code, errOut, len(out))
			}
		})
	}
	// What the generated scripts ask of tollgate when the user presses
	// tab: the candidates, then a line ":directive".
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "ex"}, "explain\tShow which rule a descriptor resolves to, and why\n:4\n"},
		{[]string{"__complete", "serve", "--store", ""}, "memory\nredis\n:4\n"},
		{[]string{"__complete", "check", "--failure-mode", ""}, "open\nclosed\nlocal\n:4\n"},
		{[]string{"__complete", "bench", "--dist", ""}, "uniform\nzipf\n:4\n"},
		{[]string{"__complete", "check", ""}, ":16\n"}, // directories
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, _ := runMain(tt.args...)
			if code != 0 || out != tt.want {
				t.Errorf("exit %d, stdout %q; want exit 0, stdout %q", code, out, tt.want)
			}
		})
	}
}
