package cli

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

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
	settings := app.Flags(flags(cmd))
	completeSettings(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if _, set := os.LookupEnv("GOGC"); !set {
			debug.SetGCPercent(gcPercent)
		}
		s, err := app.LoadSettings(settings, c.getenv)
		if err != nil {
			return err
		}
		logger, err := s.Log.NewLogger(c.stderr)
		if err != nil {
			return err
		}
		redis.RouteClientLogs(logger) // go-redis has one logger per process
		return serve(cmd.Context(), s, logger)
	}
	return cmd
}

// serve runs a tollgate with the settings s until ctx ends, and turns
// every SIGHUP meanwhile into a forced reload of the rules.
func serve(ctx context.Context, s app.Settings, logger *slog.Logger) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			}
			logger.Info("SIGHUP: reloading descriptor configuration")
			select {
			case reload <- struct{}{}:
			default: // a reload is pending already
			}
		}
	})
	a, err := app.New(ctx, s, logger, reload)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
