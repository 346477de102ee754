package redis

import (
	"context"
	"fmt"
	"log/slog"

	goredis "github.com/redis/go-redis/v9"
)

// RouteClientLogs sends the log lines of go-redis itself, which it would
// print to stderr, to logger at debug level: during an outage it logs
// every failed dial, while tollgate reports the outage once, through its
// circuit breaker. go-redis keeps one logger per process, so this is for
// the process's entry point to call once.
func RouteClientLogs(logger *slog.Logger) {
	goredis.SetLogger(clientLog{logger.With("component", "go-redis")})
}

// clientLog is go-redis's logging interface over slog.
type clientLog struct{ log *slog.Logger }

func (l clientLog) Printf(ctx context.Context, format string, v ...any) {
	if l.log.Enabled(ctx, slog.LevelDebug) {
		l.log.DebugContext(ctx, fmt.Sprintf(format, v...))
	}
}
