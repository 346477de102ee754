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

	"github.com/spf13/pflag"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/loadgen"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

const usage = `tollgate: a rate-limit service for Envoy.

Usage:
  tollgate [serve] [flags]        serve the RateLimitService (the default)
  tollgate check [DIR] [flags]    validate a descriptor configuration directory
  tollgate explain [DIR] --domain D --descriptor k=v,k2=v2 [flags]
                                  show which rule a descriptor resolves to, and why
  tollgate query --addr HOST:PORT --domain D --descriptor k=v[,k2=v2] [--descriptor ...] [--hits N]
                                  send one ShouldRateLimit call and print the answer
  tollgate bench --addr HOST:PORT --domain D --descriptor 'api_key=k{key}' [-c N] [--rate R] ...
                                  load any RateLimitService and print JSON results
  tollgate schema                 print the JSON Schema of descriptor configuration files
  tollgate health [--addr HOST:PORT] [--service NAME] [--timeout D]
                                  gRPC health check; exit 0 when SERVING, 1 otherwise

check and explain take serve's flags, TOLLGATE_* environment and --settings
file, so they judge a configuration exactly as serve would; DIR stands for
--config-dir.

Run "tollgate COMMAND --help" for a command's flags.
`

// Main runs the tollgate command line with args (without the program name)
// and returns the process exit code. Only main calls os.Exit.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return run(ctx, args, stdout, stderr, os.Getenv)
}

// run is Main reading the environment through getenv, so that tests need
// not touch the process environment.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(ctx, args, stderr, getenv)
	case "check":
		err = check(args, stdout, stderr, getenv)
	case "explain":
		err = explain(args, stdout, stderr, getenv)
	case "query":
		err = query(ctx, args, stdout)
	case "bench":
		err = bench(ctx, args, stdout)
	case "schema":
		err = schema(args, stdout)
	case "health":
		err = health(ctx, args, stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "tollgate: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, pflag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "tollgate %s: %v\n", cmd, err)
		return 2
	default:
		fmt.Fprintf(stderr, "tollgate %s: %v\n", cmd, err)
		return 1
	}
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

// gcPercent is the garbage collector's target that serve sets unless GOGC
// is set. The service's live heap is small, so Go's default of 100
// collects many times a second under load, and every collection shrinks
// the stacks of the gRPC workers that the next calls grow again; 400 cut
// the CPU per decision by a fifth in the Redis load test.
const gcPercent = 400

func serve(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) error {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
	fs := newFlagSet("serve")
	fs.SetOutput(stderr)
	settings := settingsFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected arguments %q", fs.Args())
	}
	s, err := loadSettings(settings, getenv)
	if err != nil {
		return err
	}
	logger, err := newLogger(s, stderr)
	if err != nil {
		return err
	}
	redis.RouteClientLogs(logger) // go-redis has one logger per process
	a, err := New(ctx, s, logger)
	if err != nil {
		return err
	}
	return a.Run(ctx)
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

// loadTree loads the descriptor configuration for check and explain with
// the settings and through the loader of serve. fs holds the command's own
// flags; its one optional argument is the configuration directory, and
// stands for --config-dir.
func loadTree(fs *pflag.FlagSet, args []string, getenv func(string) string) (*descriptor.Tree, error) {
	settings := settingsFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch fs.NArg() {
	case 0:
	case 1:
		if err := fs.Set("config-dir", fs.Arg(0)); err != nil {
			return nil, err
		}
	default:
		return nil, usageError("want at most one configuration directory, got %d arguments", fs.NArg())
	}
	s, err := loadSettings(settings, getenv)
	if err != nil {
		return nil, err
	}
	r, err := newReloader(s, nil, nil)
	if err != nil {
		return nil, err
	}
	return r.Current(), nil
}

func check(args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("check")
	fs.SetOutput(stderr)
	tree, err := loadTree(fs, args, getenv)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ok: %d domains, hash %s\n", len(tree.Domains()), tree.Hash())
	return nil
}

func explain(args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("explain")
	fs.SetOutput(stderr)
	domain := fs.String("domain", "", "domain of the descriptor")
	desc := fs.String("descriptor", "", "descriptor entries: k=v,k2=v2")
	tree, err := loadTree(fs, args, getenv)
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
	fmt.Fprint(stdout, d.Explain(entries).String())
	return nil
}

func query(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("query")
	addr := fs.String("addr", "127.0.0.1:8081", "RateLimitService address")
	domain := fs.String("domain", "", "domain of the request")
	descs := fs.StringArray("descriptor", nil, "descriptor entries k=v,k2=v2; repeat for several descriptors")
	hits := fs.Uint32("hits", 0, "request hits_addend (0 means 1)")
	timeout := fs.Duration("timeout", 2*time.Second, "deadline of the call")
	var tlsOpts rlsclient.TLS
	tlsOpts.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
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
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	resp, err := client.Query(ctx, req)
	if err != nil {
		return fmt.Errorf("querying %s: %w", *addr, err)
	}
	fmt.Fprint(stdout, rlsclient.Format(resp))
	return nil
}

func bench(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench")
	var opts loadgen.Options
	opts.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected arguments %q", fs.Args())
	}
	res, err := loadgen.Run(ctx, opts)
	if errors.Is(err, loadgen.ErrInvalidOptions) {
		return usageError("%v", err)
	}
	if res != nil {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if encErr := enc.Encode(res); encErr != nil && err == nil {
			err = encErr
		}
	}
	return err
}
