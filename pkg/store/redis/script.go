package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
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
		load := func(ctx context.Context, node *goredis.Client) error {
			return node.FunctionLoadReplace(ctx, applyLibrary).Err()
		}
		var err error
		if cc, ok := s.client.(*goredis.ClusterClient); ok {
			err = cc.ForEachMaster(ctx, load)
		} else {
			err = s.client.FunctionLoadReplace(ctx, applyLibrary).Err()
		}
		if err == nil {
			return nil
		}
		if !functionsDenied(err) {
			return fmt.Errorf("loading the function library: %w", err)
		}
		s.denyFunctions(err)
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

// functionsDenied reports whether err is Redis refusing the user Redis
// Functions by its ACL: FUNCTION LOAD, or FCALL.
func functionsDenied(err error) bool {
	if !goredis.HasErrorPrefix(err, "NOPERM") {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "'function|") || strings.Contains(msg, "'fcall")
}

// denyFunctions makes the store call the script with EVALSHA from now on,
// as its Redis user may not use Redis Functions (err says so), and logs
// that once. The scripting commands are enough: they ran the script before
// Redis had Functions.
func (s *Store) denyFunctions(err error) {
	if !s.noFunctions.Swap(true) {
		s.log.Warn("the redis user may not use Redis Functions (FUNCTION LOAD, FCALL): calling the script with EVALSHA instead; "+
			"grant +function|load and +fcall to save the script's setup on every call", "error", err)
	}
	for {
		st := s.server.Load()
		if st == nil || !st.functions {
			return
		}
		scripts := *st
		scripts.functions = false
		if s.server.CompareAndSwap(st, &scripts) {
			return
		}
	}
}

// runsAfterPrepare reports whether a call that failed with err, before the
// script ran, may run after prepare: the server lacks the script (see
// needsLoad), or the Redis user may not use Redis Functions, which the
// store then stops using (see denyFunctions).
func (s *Store) runsAfterPrepare(err error) bool {
	if needsLoad(err) {
		return true
	}
	if functionsDenied(err) {
		s.denyFunctions(err)
		return true
	}
	return false
}

// needsLoad reports whether err says the server lacks the script or
// library (it restarted, or its cache was flushed) or the FCALL command
// (another server took over).
func needsLoad(err error) bool {
	return goredis.HasErrorPrefix(err, "NOSCRIPT") ||
		goredis.HasErrorPrefix(err, "Function not found") ||
		goredis.HasErrorPrefix(err, "unknown command")
}

// run sends groups in one round trip, as one script call per slot (a
// pipeline when there are several), and leaves each call's result or error
// in it. Calls that Redis answers with READONLY are sent again, once: the
// server, a master that a failover demoted, refused them before changing
// anything, and the client has dropped its connections to it (see
// readonly.go). Calls answered with NOSCRIPT (or the like, see
// runsAfterPrepare) are sent again after prepare, up to maxPrepares times.
func (s *Store) run(ctx context.Context, groups []*group) {
	if err := s.gate(ctx); err != nil {
		for _, g := range groups {
			g.err = err
		}
		return
	}
	s.send(ctx, groups)
	var retry, resend []*group
	reload := false
	classify := func(groups []*group, resend *[]*group) {
		for _, g := range groups {
			var reply goredis.Error
			switch {
			case g.err == nil:
			case s.runsAfterPrepare(g.err):
				retry = append(retry, g)
			case resend != nil && goredis.IsReadOnlyError(g.err):
				*resend = append(*resend, g)
			case !errors.As(g.err, &reply):
				reload = true
			}
		}
	}
	classify(groups, &resend)
	if len(resend) > 0 {
		s.send(ctx, resend)
		classify(resend, nil)
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
	// A prepare already under way may have loaded the script before Redis
	// lost it, so a retry may meet NOSCRIPT again: a second prepare then
	// starts after it.
	for range maxPrepares {
		if len(retry) == 0 {
			return
		}
		if err := s.prepare(ctx); err != nil {
			if !errors.Is(err, ErrUnsupportedVersion) {
				err = fmt.Errorf("after %w: %w", retry[0].err, err)
			}
			for _, g := range retry {
				g.err = err
			}
			return
		}
		s.send(ctx, retry)
		again := retry[:0]
		for _, g := range retry {
			if g.err != nil && s.runsAfterPrepare(g.err) {
				again = append(again, g)
			}
		}
		retry = again
	}
}

// maxPrepares bounds the prepares one run waits for.
const maxPrepares = 2

// maxCallHits is the most hits merged into one script call, so that one
// call never holds Redis for long: 256 token-bucket hits take it about a
// millisecond. A single Apply's slot group may be larger; it then goes
// alone.
const maxCallHits = 256

// call is one script call (FCALL or EVALSHA): groups of one slot, in order, as the
// script (see apply.lua).
type call struct {
	slot   int
	groups []*group
	hits   int
	now    int64 // the latest of the groups' instants, on a client's clock
	// keys and args are the groups' keys and encodings, concatenated, when
	// there are several.
	keys []string
	args []byte
	// nowArg is ARGV[1].
	nowArg []byte
	cmd    *goredis.Cmd
}

// sending holds the calls of one round trip; it is reused through a pool.
type sending struct {
	calls []call
}

// merge fills sd with the calls that carry groups: each group joins the
// latest call of its slot while that stays within maxCallHits, so the
// groups of a slot keep their order.
func (sd *sending) merge(groups []*group) {
	sd.calls = sd.calls[:0]
	for _, g := range groups {
		var cl *call
		for i := len(sd.calls) - 1; i >= 0; i-- {
			if sd.calls[i].slot == g.slot {
				cl = &sd.calls[i]
				break
			}
		}
		if cl == nil || cl.hits+len(g.keys) > maxCallHits {
			if len(sd.calls) < cap(sd.calls) {
				sd.calls = sd.calls[:len(sd.calls)+1]
			} else {
				sd.calls = append(sd.calls, call{})
			}
			cl = &sd.calls[len(sd.calls)-1]
			cl.slot, cl.groups, cl.hits, cl.now = g.slot, cl.groups[:0], 0, g.now
		}
		cl.groups = append(cl.groups, g)
		cl.hits += len(g.keys)
		cl.now = max(cl.now, g.now)
	}
}

// clear drops the references sd holds, keeping its buffers.
func (sd *sending) clear() {
	for i := range sd.calls {
		cl := &sd.calls[i]
		clear(cl.groups)
		clear(cl.keys)
		cl.groups, cl.keys, cl.cmd = cl.groups[:0], cl.keys[:0], nil
	}
	sd.calls = sd.calls[:0]
}

// send is one round trip of run: the groups of each slot go in as few
// script calls as maxCallHits allows.
func (s *Store) send(ctx context.Context, groups []*group) {
	sd := s.sendings.Get().(*sending)
	sd.merge(groups)
	s.metrics.roundTrips.Add(ctx, 1)
	s.metrics.scriptCalls.Add(ctx, int64(len(sd.calls)))
	s.metrics.batchSize.Record(ctx, int64(len(groups)))
	if len(sd.calls) == 1 {
		cl := &sd.calls[0]
		cl.result(s.evalSha(ctx, s.client, cl))
	} else {
		pipe := s.client.Pipeline()
		for i := range sd.calls {
			cl := &sd.calls[i]
			cl.cmd = s.evalSha(ctx, pipe, cl)
		}
		_, _ = pipe.Exec(ctx) // each command holds its own error
		for i := range sd.calls {
			sd.calls[i].result(sd.calls[i].cmd)
		}
	}
	sd.clear()
	s.sendings.Put(sd)
}
