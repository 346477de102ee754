package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/loadgen"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
	"github.com/tollgatehq/tollgate/pkg/version"
)

// Main runs the tollgate command line with args (without the program name)
// and returns the process exit code: 0 on success, 1 when the command
// failed, 2 on a usage error. Only main calls os.Exit.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return run(ctx, args, stdout, stderr, os.Getenv)
}

// MainEnv is Main reading the environment through getenv rather than
// the process's, so that tests can start tollgate from an environment of
// their own.
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
		newQueryCommand(c),
		newBenchCommand(c),
		newSchemaCommand(c),
		newHealthCommand(c),
		newAdminCommand(c),
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

func newFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("tollgate "+name, pflag.ContinueOnError)
	fs.SortFlags = false
	return fs
}

// flags returns cmd's flags, listed in help in the order declared.
func flags(cmd *cobra.Command) *pflag.FlagSet {
	fs := cmd.Flags()
	fs.SortFlags = false
	return fs
}

// gcPercent is the garbage collector's target that serve sets unless GOGC
// is set. The service's live heap is small, so Go's default of 100
// collects many times a second under load, and every collection shrinks
// the stacks of the gRPC workers that the next calls grow again; 400 cut
// the CPU per decision by a fifth in the Redis load test.
const gcPercent = 400

func newServeCommand(c cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Serve the RateLimitService over gRPC and HTTP (the default command)",
		Long: `Serve the RateLimitService over gRPC, the JSON check, health and metrics over
HTTP, and /debug/config and pprof on the debug address, and reload the
descriptor configuration when its directory changes or on SIGHUP.

Every flag can also be set as TOLLGATE_<FLAG> in the environment
(TOLLGATE_STORE=redis) or in the --settings file; a flag wins over the
environment, and the environment over the file.`,
		Args: noArgs,
	}
	settings := settingsFlags(flags(cmd))
	completeSettings(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if _, set := os.LookupEnv("GOGC"); !set {
			debug.SetGCPercent(gcPercent)
		}
		s, err := loadSettings(settings, c.getenv)
		if err != nil {
			return err
		}
		logger, err := newLogger(s, c.stderr)
		if err != nil {
			return err
		}
		redis.RouteClientLogs(logger) // go-redis has one logger per process
		s.ratelimitEnv.log(logger)
		a, err := New(cmd.Context(), s, logger)
		if err != nil {
			return err
		}
		return a.Run(cmd.Context())
	}
	return cmd
}

func newLogger(s Settings, w io.Writer) (*slog.Logger, error) {
	level, err := parseLevel(s.LogLevel)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	if s.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// completeSettings offers the values of serve's enumerated settings to
// shell completion.
func completeSettings(cmd *cobra.Command) {
	for name, values := range map[string][]string{
		"store":             {"memory", "redis"},
		"default-algorithm": {"token_bucket", "fixed_window", "sliding_window_counter", "sliding_window_log"},
		"response-headers":  {"none", "draft03", "xratelimit", "ietf"},
		"log-level":         {"debug", "info", "warn", "error"},
		"log-format":        {"text", "json"},
		"redis-type":        {"single", "sentinel", "cluster"},
		"failure-mode":      {"open", "closed", "local"},
	} {
		// Only fails for a flag that does not exist or is registered
		// twice, which TestCompletion would catch.
		_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
	}
	_ = cmd.MarkFlagDirname("config-dir")
	_ = cmd.MarkFlagFilename("settings", "yaml", "yml", "toml", "json")
}

// completeDir completes a command's one optional DIR argument with
// directories.
func completeDir(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return nil, cobra.ShellCompDirectiveFilterDirs
}

// loadTree loads the descriptor configuration for check and explain with
// the settings and through the loader of serve. settings are the parsed
// settings flags; the one optional argument is the configuration
// directory, and stands for --config-dir.
func loadTree(settings *pflag.FlagSet, args []string, getenv func(string) string) (*descriptor.Tree, error) {
	switch len(args) {
	case 0:
	case 1:
		if err := settings.Set("config-dir", args[0]); err != nil {
			return nil, err
		}
	default:
		return nil, usageError("want at most one configuration directory, got %d arguments", len(args))
	}
	s, err := loadSettings(settings, getenv)
	if err != nil {
		return nil, err
	}
	r, err := newReloader(s, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	return r.Current(), nil
}

func newCheckCommand(c cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check [DIR] [flags]",
		Short: "Validate a descriptor configuration directory as serve would load it",
		Long: `Validate the descriptor configuration in DIR (default: --config-dir) with
serve's flags, TOLLGATE_* environment and --settings file, so that it accepts
exactly what serve accepts, values files included. Prints every error with
file, line and descriptor path, and exits 1 if there is any.`,
		ValidArgsFunction: completeDir,
	}
	settings := settingsFlags(flags(cmd))
	completeSettings(cmd)
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		tree, err := loadTree(settings, args, c.getenv)
		if err != nil {
			return err
		}
		lists := ""
		switch n := len(tree.ValuesFiles()); n {
		case 0:
		case 1:
			lists = "1 values file, "
		default:
			lists = fmt.Sprintf("%d values files, ", n)
		}
		fmt.Fprintf(c.stdout, "ok: %d domains, %shash %s\n", len(tree.Domains()), lists, tree.Hash())
		return nil
	}
	return cmd
}

func newExplainCommand(c cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "explain [DIR] --domain D --descriptor k=v,k2=v2 [flags]",
		Short: "Show which rule a descriptor resolves to, and why",
		Long: `Show which rule of the configuration in DIR (default: --config-dir) a
descriptor resolves to, and how each entry matched: exact value, wildcard
pattern or the key's default. The configuration is loaded as serve and check
load it, with the same flags, environment and settings file.`,
		ValidArgsFunction: completeDir,
	}
	fs := flags(cmd)
	domain := fs.String("domain", "", "domain of the descriptor")
	desc := fs.String("descriptor", "", "descriptor entries: k=v,k2=v2")
	settings := settingsFlags(fs)
	completeSettings(cmd)
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		tree, err := loadTree(settings, args, c.getenv)
		if err != nil {
			return err
		}
		entries, err := rlsclient.ParseDescriptor(*desc)
		if err != nil {
			return usageError("--descriptor: %v", err)
		}
		d := tree.Domain(*domain)
		if d == nil {
			return fmt.Errorf("domain %q is not configured (configured: %s); tollgate answers OK for every descriptor of an unknown domain",
				*domain, strings.Join(tree.Domains(), ", "))
		}
		fmt.Fprint(c.stdout, d.Explain(entries).String())
		return nil
	}
	return cmd
}

func newQueryCommand(c cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "query --addr HOST:PORT --domain D --descriptor k=v[,k2=v2] [--descriptor ...] [--hits N]",
		Short: "Send one ShouldRateLimit call and print the answer",
		Args:  noArgs,
	}
	fs := flags(cmd)
	addr := fs.String("addr", "127.0.0.1:8081", "RateLimitService address")
	domain := fs.String("domain", "", "domain of the request")
	descs := fs.StringArray("descriptor", nil, "descriptor entries k=v,k2=v2; repeat for several descriptors")
	hits := fs.Uint32("hits", 0, "request hits_addend (0 means 1)")
	timeout := fs.Duration("timeout", 2*time.Second, "deadline of the call")
	var tlsOpts rlsclient.TLS
	tlsOpts.Flags(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *domain == "" || len(*descs) == 0 {
			return usageError("--domain and at least one --descriptor are required")
		}
		req := rlsclient.Request{Domain: *domain, Hits: *hits}
		for _, d := range *descs {
			entries, err := rlsclient.ParseDescriptor(d)
			if err != nil {
				return usageError("--descriptor %q: %v", d, err)
			}
			req.Descriptors = append(req.Descriptors, entries)
		}
		client, err := rlsclient.DialTLS(*addr, tlsOpts)
		if err != nil {
			return err
		}
		defer client.Close()
		ctx, cancel := context.WithTimeout(cmd.Context(), *timeout)
		defer cancel()
		resp, err := client.Query(ctx, req)
		if err != nil {
			return fmt.Errorf("querying %s: %w", *addr, err)
		}
		fmt.Fprint(c.stdout, rlsclient.Format(resp))
		return nil
	}
	return cmd
}

func newBenchCommand(c cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench --addr HOST:PORT --domain D --descriptor 'api_key=k{key}' [-c N] [--rate R] [flags]",
		Short: "Load any RateLimitService and print JSON results",
		Args:  noArgs,
	}
	var opts loadgen.Options
	opts.Flags(flags(cmd))
	_ = cmd.RegisterFlagCompletionFunc("dist",
		cobra.FixedCompletions([]string{"uniform", "zipf"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		res, err := loadgen.Run(cmd.Context(), opts)
		if errors.Is(err, loadgen.ErrInvalidOptions) {
			return usageError("%v", err)
		}
		if res != nil {
			enc := json.NewEncoder(c.stdout)
			enc.SetIndent("", "  ")
			if encErr := enc.Encode(res); encErr != nil && err == nil {
				err = encErr
			}
		}
		return err
	}
	return cmd
}

func newVersionCommand(c cli, info version.Info) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this build",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := io.WriteString(c.stdout, versionText(info))
			return err
		},
	}
}

// versionText is what `tollgate version` prints.
func versionText(info version.Info) string {
	return fmt.Sprintf("tollgate %s\nrevision: %s\ngo: %s\n", info.Version, info.Revision, info.GoVersion)
}
