// Package cli is tollgate's command line: the cobra command tree, one file
// per command, and the process's signals. Commands that serve or judge a
// configuration take the settings that package app declares, so serve,
// check and explain accept exactly the same flags, TOLLGATE_* environment
// and settings file; the client commands (query, bench, health, admin) take
// flags of their own.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tollgatehq/tollgate/pkg/version"
)

// Main runs the tollgate command line with args (without the program name)
// and returns the process exit code: 0 on success, 1 when the command
// failed, 2 on a usage error. SIGINT and SIGTERM stop it: a serving
// tollgate shuts down gracefully. Only main calls os.Exit.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, stdout, stderr, os.Getenv)
}

// MainEnv is Main stopped by ctx rather than by signals, reading the
// environment through getenv rather than the process's, so that tests can
// start tollgate from an environment of their own.
func MainEnv(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return run(ctx, args, stdout, stderr, getenv)
}

// run is Main reading the environment through getenv, so that tests need
// not touch the process environment.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if servesByDefault(args) {
		args = append([]string{"serve"}, args...)
	}
	root := newRootCommand(cli{stdout: stdout, stderr: stderr, getenv: getenv})
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	switch {
	case err == nil:
		return 0
	case cmd == root:
		// The root runs nothing: its only error is an unknown command.
		fmt.Fprintf(stderr, "tollgate: %v\nRun 'tollgate --help' for the commands.\n", err)
		return 2
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
		return 2
	default:
		fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
		return 1
	}
}

// servesByDefault reports whether args name no command, so that they are
// serve's: none at all, or flags first, as in `tollgate --store redis`.
// The root's own --help and --version are the exceptions.
func servesByDefault(args []string) bool {
	if len(args) == 0 {
		return true
	}
	switch args[0] {
	case "-h", "--help", "--version":
		return false
	}
	return strings.HasPrefix(args[0], "-")
}

// cli holds what every command writes to and reads from.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// newRootCommand returns the tollgate command with every subcommand. A new
// command is one more newXCommand(c) added here: it declares its flags on
// cmd.Flags(), takes its context from cmd.Context(), writes to c.stdout,
// and returns usageError for a usage mistake (exit 2) or any other error
// (exit 1); run prints the error with the command's name.
func newRootCommand(c cli) *cobra.Command {
	info := version.Read()
	root := &cobra.Command{
		Use:   "tollgate",
		Short: "A rate-limit service for Envoy",
		Long: `tollgate is a rate-limit service for Envoy: it answers the RateLimitService
over gRPC from descriptor rules in YAML files, counting in memory or in Redis.

Without a command, tollgate serves: "tollgate --store redis" is "tollgate
serve --store redis". check and explain take serve's flags, TOLLGATE_*
environment and --settings file, so they judge a configuration exactly as
serve would.`,
		Version:       info.Version,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetVersionTemplate(versionText(info))
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError("%v", err) })
	// Declared here rather than by cobra, which would add a -v shorthand.
	root.Flags().Bool("version", false, "print the version, commit and Go version, as the version command does")
	root.AddCommand(
		newServeCommand(c),
		newCheckCommand(c),
		newExplainCommand(c),
		newReplayCommand(c),
		newQueryCommand(c),
		newBenchCommand(c),
		newSchemaCommand(c),
		newHealthCommand(c),
		newAdminCommand(c),
		newTopCommand(c),
		newVersionCommand(c, info),
	)
	return root
}

// noArgs is a cobra.PositionalArgs that accepts no arguments, with a
// usage error.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError("unexpected arguments %q", args)
	}
	return nil
}

var errUsage = errors.New("usage")

func usageError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// flags returns cmd's flags, listed in help in the order declared.
func flags(cmd *cobra.Command) *pflag.FlagSet {
	fs := cmd.Flags()
	fs.SortFlags = false
	return fs
}
