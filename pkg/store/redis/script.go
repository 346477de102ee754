package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// applySource defines apply, which decides groups of hits, each the hits
// of one Apply in one slot; see its header comment.
//
//go:embed apply.lua
var applySource string

// applyScript is the script EVALSHA runs: applySource calling apply.
var applyScript = applySource + "\nreturn apply(KEYS, ARGV)\n"

// applySHA is the SHA1 digest EVALSHA names applyScript by.
var applySHA = func() string {
	sum := sha1.Sum([]byte(applyScript))
	return hex.EncodeToString(sum[:])
}()

// applyFunction is the name FCALL calls apply by, and applyLibrary the
// function library that defines it, for servers with Redis Functions. Both
// names carry the script's digest, so that instances running different
// versions of the script, as during a rolling upgrade, each keep their own.
var (
	applyFunction = "tollgate_apply_" + applySHA[:16]
	applyLibrary  = "#!lua name=tollgate_" + applySHA[:16] + "\n" + applySource +
		"\nredis.register_function('" + applyFunction + "', apply)\n"
)

// recheckAfter is how long the store answers with the error of a server
// too old for it before it reads the server's version again.
const recheckAfter = time.Second

// preparing is a prepare in progress, shared by every caller that needs it
// while it runs.
type preparing struct {
	done chan struct{}
	err  error
}

// prepare reads the servers' versions and loads the script where they are
// supported: as a function library where every server has Redis Functions,
// else as a script, on every node (masters of a Cluster for a library;
// go-redis sends SCRIPT LOAD to every node). Concurrent callers share one
// prepare. A server too old is logged once, when first found.
func (s *Store) prepare(ctx context.Context) error {
	s.prepareMu.Lock()
	p := s.preparing
	if p != nil {
		s.prepareMu.Unlock()
		select {
		case <-p.done:
			return p.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p = &preparing{done: make(chan struct{})}
	s.preparing = p
	s.prepareMu.Unlock()

	p.err = s.check(ctx)
	if p.err == nil {
		p.err = s.load(ctx)
	}
	if p.err == nil {
		s.stale.Store(false)
	}
	s.prepareMu.Lock()
	s.preparing = nil
	s.prepareMu.Unlock()
	close(p.done)
	return p.err
}

// check reads the servers' versions into s.server, logging a change.
func (s *Store) check(ctx context.Context) error {
	st, err := s.checkServers(ctx)
	if err != nil {
		return err
	}
	st.recheck = time.Now().Add(recheckAfter)
	old := s.server.Swap(st)
	switch {
	case st.err != nil && (old == nil || old.err == nil || old.err.Error() != st.err.Error()):
		s.log.Error("redis server too old: answering every decision by the rules' failure modes", "error", st.err)
	case st.err == nil && old != nil && old.err != nil:
		s.log.Info("redis server version supported again", "servers", st.versions)
	case st.err == nil && (old == nil || old.versions != st.versions):
		s.log.Info("redis servers", "servers", st.versions, "functions", st.functions)
	}
	return st.err
}

// load loads the script in the form s.server calls for.
func (s *Store) load(ctx context.Context) error {
	s.metrics.loads.Add(ctx, 1)
	if st := s.server.Load(); st != nil && st.functions {
		load := func(ctx context.Context, c *goredis.Client) error {
			return c.FunctionLoadReplace(ctx, applyLibrary).Err()
		}
		var err error
		if cc, ok := s.client.(*goredis.ClusterClient); ok {
			err = cc.ForEachMaster(ctx, load)
		} else {
			err = s.client.FunctionLoadReplace(ctx, applyLibrary).Err()
		}
		if err != nil {
			return fmt.Errorf("loading the function library: %w", err)
		}
		return nil
	}
	sha, err := s.client.ScriptLoad(ctx, applyScript).Result()
	if err == nil && sha != applySHA {
		err = fmt.Errorf("SCRIPT LOAD returned digest %s, want %s", sha, applySHA)
	}
	if err != nil {
		return fmt.Errorf("loading the script: %w", err)
	}
	return nil
}

// gate returns the error of a server too old for the store, reading the
// versions again when they may have changed: after a network error (a
// reconnect may reach another server) and every recheckAfter while a
// server is too old.
func (s *Store) gate(ctx context.Context) error {
	st := s.server.Load()
	if s.stale.Load() || (st != nil && st.err != nil && time.Now().After(st.recheck)) {
		if err := s.prepare(ctx); err != nil {
			return err
		}
		st = s.server.Load()
	}
	if st != nil {
		return st.err
	}
	return nil
}

// needsLoad reports whether err says the server lacks the script or
// library (it restarted, or its cache was flushed) or the FCALL command
// (another server took over).
func needsLoad(err error) bool {
	return goredis.HasErrorPrefix(err, "NOSCRIPT") ||
		goredis.HasErrorPrefix(err, "Function not found") ||
		goredis.HasErrorPrefix(err, "unknown command")
}

// run sends calls in one round trip, as one script call per slot (a
// pipeline when there are several), and leaves each call's result or error
// in it. Calls that Redis answers with NOSCRIPT (or the like, see
// needsLoad) are sent again, once, after prepare.
func (s *Store) run(ctx context.Context, calls []*call) {
	if err := s.gate(ctx); err != nil {
		for _, c := range calls {
			c.err = err
		}
		return
	}
	s.send(ctx, calls)
	retry := calls[:0:0]
	reload := false
	for _, c := range calls {
		var reply goredis.Error
		switch {
		case c.err == nil:
		case needsLoad(c.err):
			retry = append(retry, c)
		case !errors.As(c.err, &reply):
			reload = true
		}
	}
	if reload {
		// A reconnect may reach another server: read its version first.
		s.stale.Store(true)
	}
	if reload && s.cluster {
		// go-redis keeps sending a dead master's slots to it until its
		// next periodic reload of the topology, a minute later, although
		// a replica took over in seconds (go-redis issue 3979). A network
		// failure or timeout asks for the topology now; go-redis runs one
		// reload at a time.
		s.client.(*goredis.ClusterClient).ReloadState(context.Background())
	}
	if len(retry) == 0 {
		return
	}
	if err := s.prepare(ctx); err != nil {
		if !errors.Is(err, ErrUnsupportedVersion) {
			err = fmt.Errorf("after %v: %w", retry[0].err, err)
		}
		for _, c := range retry {
			c.err = err
		}
		return
	}
	s.send(ctx, retry)
}

// maxScriptHits is the most hits merged into one script call, so that one
// call never holds Redis for long: 256 token-bucket hits take it about a
// millisecond. A single Apply's slot group may be larger; it then goes
// alone.
const maxScriptHits = 256

// script is one EVALSHA: calls of one slot, in order, each a group of the
// script (see apply.lua).
type script struct {
	slot  int
	calls []*call
	hits  int
	now   int64 // the latest of the calls' instants, on a client's clock
	// keys and args are the calls' keys and groups, concatenated, when
	// there are several.
	keys []string
	args []byte
	// nowArg is ARGV[1].
	nowArg []byte
	cmd    *goredis.Cmd
}

// sending holds the scripts of one round trip; it is reused through a pool.
type sending struct {
	scripts []script
}

// merge fills sd with the scripts that carry calls: each call joins the
// latest script of its slot while that stays within maxScriptHits, so the
// calls of a slot keep their order.
func (sd *sending) merge(calls []*call) {
	sd.scripts = sd.scripts[:0]
	for _, c := range calls {
		var sc *script
		for i := len(sd.scripts) - 1; i >= 0; i-- {
			if sd.scripts[i].slot == c.slot {
				sc = &sd.scripts[i]
				break
			}
		}
		if sc == nil || sc.hits+len(c.keys) > maxScriptHits {
			if len(sd.scripts) < cap(sd.scripts) {
				sd.scripts = sd.scripts[:len(sd.scripts)+1]
			} else {
				sd.scripts = append(sd.scripts, script{})
			}
			sc = &sd.scripts[len(sd.scripts)-1]
			sc.slot, sc.calls, sc.hits, sc.now = c.slot, sc.calls[:0], 0, c.now
		}
		sc.calls = append(sc.calls, c)
		sc.hits += len(c.keys)
		sc.now = max(sc.now, c.now)
	}
}

// clear drops the references sd holds, keeping its buffers.
func (sd *sending) clear() {
	for i := range sd.scripts {
		sc := &sd.scripts[i]
		clear(sc.calls)
		clear(sc.keys)
		sc.calls, sc.keys, sc.cmd = sc.calls[:0], sc.keys[:0], nil
	}
	sd.scripts = sd.scripts[:0]
}

// send is one round trip of run: the calls of each slot go in as few
// script calls as maxScriptHits allows.
func (s *Store) send(ctx context.Context, calls []*call) {
	sd := s.sendings.Get().(*sending)
	sd.merge(calls)
	s.metrics.roundTrips.Add(ctx, 1)
	s.metrics.scriptCalls.Add(ctx, int64(len(sd.scripts)))
	s.metrics.batchSize.Record(ctx, int64(len(calls)))
	if len(sd.scripts) == 1 {
		sc := &sd.scripts[0]
		sc.result(s.evalSha(ctx, s.client, sc))
	} else {
		pipe := s.client.Pipeline()
		for i := range sd.scripts {
			sc := &sd.scripts[i]
			sc.cmd = s.evalSha(ctx, pipe, sc)
		}
		_, _ = pipe.Exec(ctx) // each command holds its own error
		for i := range sd.scripts {
			sd.scripts[i].result(sd.scripts[i].cmd)
		}
	}
	sd.clear()
	s.sendings.Put(sd)
}

// scripter sends or queues a script call: a client or a pipeline.
type scripter interface {
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *goredis.Cmd
	FCall(ctx context.Context, function string, keys []string, args ...any) *goredis.Cmd
}

// evalSha queues or sends the script call of sc: an FCALL where the
// servers have Redis Functions, else an EVALSHA.
func (s *Store) evalSha(ctx context.Context, c scripter, sc *script) *goredis.Cmd {
	sc.nowArg = sc.nowArg[:0]
	if s.now != nil {
		sc.nowArg = strconv.AppendInt(sc.nowArg, sc.now, 10)
	}
	keys, args := sc.calls[0].keys, sc.calls[0].args
	if len(sc.calls) > 1 {
		sc.keys, sc.args = sc.keys[:0], sc.args[:0]
		for _, c := range sc.calls {
			sc.keys = append(sc.keys, c.keys...)
			sc.args = append(sc.args, c.args...)
		}
		keys, args = sc.keys, sc.args
	}
	if st := s.server.Load(); st != nil && st.functions {
		return c.FCall(ctx, applyFunction, keys, sc.nowArg, s.slack, args)
	}
	return c.EvalSha(ctx, applySHA, keys, sc.nowArg, s.slack, args)
}

// result hands each call of sc its part of the script's reply: now, the
// results of every hit (5 little-endian int64 each), then the group number
// and error message of each failed group.
func (sc *script) result(cmd *goredis.Cmd) {
	if err := sc.parse(cmd); err != nil {
		for _, c := range sc.calls {
			c.res, c.err = c.res[:0], err
		}
	}
}

// parse is result, returning an error when the reply fails or is malformed.
func (sc *script) parse(cmd *goredis.Cmd) error {
	if err := cmd.Err(); err != nil {
		return err
	}
	vals, _ := cmd.Val().([]any)
	if len(vals) < 2 || len(vals)%2 != 0 {
		return fmt.Errorf("script returned %T of %d values, want now, results and failures", cmd.Val(), len(vals))
	}
	now, ok1 := vals[0].(int64)
	res, ok2 := vals[1].(string)
	if !ok1 || !ok2 || len(res) != 8*5*sc.hits {
		return fmt.Errorf("script returned %T and %T of %d bytes for %d hits", vals[0], vals[1], len(res), sc.hits)
	}
	for _, c := range sc.calls {
		c.decidedAt, c.err = now, nil
		c.res = c.res[:0]
		for range 5 * len(c.keys) {
			c.res = append(c.res, int64(binary.LittleEndian.Uint64([]byte(res[:8]))))
			res = res[8:]
		}
	}
	for f := vals[2:]; len(f) > 0; f = f[2:] {
		g, ok1 := f[0].(int64)
		msg, ok2 := f[1].(string)
		if !ok1 || !ok2 || g < 1 || g > int64(len(sc.calls)) {
			return fmt.Errorf("script returned a failure of %T %T", f[0], f[1])
		}
		sc.calls[g-1].err = errors.New(msg)
	}
	return nil
}
