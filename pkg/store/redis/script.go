package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
)

// applyScript decides one slot group of hits; see its header comment.
//
//go:embed apply.lua
var applyScript string

// applySHA is the SHA1 digest EVALSHA names applyScript by.
var applySHA = func() string {
	sum := sha1.Sum([]byte(applyScript))
	return hex.EncodeToString(sum[:])
}()

// scriptLoad is a SCRIPT LOAD in progress, shared by every caller that
// needs the script while it runs.
type scriptLoad struct {
	done chan struct{}
	err  error
}

// loadScript loads the script on every node (go-redis sends SCRIPT LOAD to
// every shard of a Cluster). Concurrent callers share one load.
func (s *Store) loadScript(ctx context.Context) error {
	s.loadMu.Lock()
	l := s.loading
	if l == nil {
		l = &scriptLoad{done: make(chan struct{})}
		s.loading = l
		s.loadMu.Unlock()
		s.metrics.loads.Add(ctx, 1)
		sha, err := s.client.ScriptLoad(ctx, applyScript).Result()
		if err == nil && sha != applySHA {
			err = fmt.Errorf("SCRIPT LOAD returned digest %s, want %s", sha, applySHA)
		}
		l.err = err
		s.loadMu.Lock()
		s.loading = nil
		s.loadMu.Unlock()
		close(l.done)
		return err
	}
	s.loadMu.Unlock()
	select {
	case <-l.done:
		return l.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run sends calls in one round trip, a pipeline when there are several, and
// leaves each call's result or error in it. Calls that Redis answers with
// NOSCRIPT are sent again, once, after the script is loaded.
func (s *Store) run(ctx context.Context, calls []*call) {
	s.send(ctx, calls)
	retry := calls[:0:0]
	for _, c := range calls {
		if c.err != nil && goredis.HasErrorPrefix(c.err, "NOSCRIPT") {
			retry = append(retry, c)
		}
	}
	if len(retry) == 0 {
		return
	}
	if err := s.loadScript(ctx); err != nil {
		for _, c := range retry {
			c.err = fmt.Errorf("loading the script after NOSCRIPT: %w", err)
		}
		return
	}
	s.send(ctx, retry)
}

// send is one round trip of run.
func (s *Store) send(ctx context.Context, calls []*call) {
	s.metrics.roundTrips.Add(ctx, 1)
	s.metrics.scriptCalls.Add(ctx, int64(len(calls)))
	s.metrics.batchSize.Record(ctx, int64(len(calls)))
	if len(calls) == 1 {
		c := calls[0]
		c.result(s.client.EvalSha(ctx, applySHA, c.keys, c.now, s.slack, c.args))
		return
	}
	pipe := s.client.Pipeline()
	cmds := make([]*goredis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = pipe.EvalSha(ctx, applySHA, c.keys, c.now, s.slack, c.args)
	}
	_, _ = pipe.Exec(ctx) // each command holds its own error
	for i, c := range calls {
		c.result(cmds[i])
	}
}

// result stores the outcome of the call's command.
func (c *call) result(cmd *goredis.Cmd) {
	c.res = c.res[:0]
	if err := cmd.Err(); err != nil {
		c.err = err
		return
	}
	vals, ok := cmd.Val().([]any)
	if !ok || len(vals) != 5*len(c.keys)+1 {
		c.err = fmt.Errorf("script returned %T of %d values for %d hits", cmd.Val(), len(vals), len(c.keys))
		return
	}
	for _, v := range vals {
		n, ok := v.(int64)
		if !ok {
			c.err = fmt.Errorf("script returned a %T", v)
			return
		}
		c.res = append(c.res, n)
	}
	c.decidedAt = c.res[len(c.res)-1]
	c.err = nil
}
