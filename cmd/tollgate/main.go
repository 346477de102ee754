// Command tollgate is a rate-limit service for Envoy. See the README.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/tollgatehq/tollgate/pkg/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := app.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
