package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// The arguments of a script call and its reply, as apply.lua reads and
// writes them:
//
//   - keys: the counter of each hit, group after group;
//   - argv[1]: now in µs since the epoch, or "" for the server's TIME;
//   - argv[2]: extra TTL in ms for every key written (serverSlack or
//     clockSlack);
//   - argv[3]: the groups, as little-endian 64-bit integers: each group
//     its number of hits n, negated when a hit of the group is charged
//     always, then n times kind, requests, burst, period (µs), cost and
//     flags (1 for a soft hit, plus 2 for an always-charged one), as
//     group.add appends them. A hit with a penalty is preceded by a
//     penalty record, which takes a key (its counter's key and "|p") and
//     the place of a hit: kind 5, then tolerance, cooldown, factor, max
//     and forgive_after (µs), as group.addPenalty appends them.
//
// The reply is a list: now (µs); a string of 5 little-endian 64-bit
// integers per hit, in hit order (allowed, remaining, resetAfter µs,
// retryAfter µs, limit; see verdict), a penalty record's all 0; then, for
// each group that failed, its number (from 1) and the error message.

// The flags of a hit in argv[3].
const (
	flagSoft   = 1
	flagAlways = 2
)

// kindPenalty marks a penalty record in argv[3].
const kindPenalty = 5

// penaltySuffix ends the key of a counter's penalty state. No counter key
// holds "|" (key.go escapes it), so none ends so.
const penaltySuffix = "|p"

// addPenalty appends the penalty record of the hit that the next add
// appends: p, under key, the key of that hit's counter with
// penaltySuffix.
func (g *group) addPenalty(p *algorithm.Penalty, key string) {
	g.keys = append(g.keys, key)
	g.hits = append(g.hits, -1)
	n := int64(len(g.keys))
	if g.always {
		n = -n
	}
	binary.LittleEndian.PutUint64(g.args, uint64(n))
	for _, x := range [...]int64{kindPenalty, p.Tolerance, p.Cooldown, p.Factor, p.Max, p.ForgiveAfter} {
		g.args = binary.LittleEndian.AppendUint64(g.args, uint64(x))
	}
}

// add appends hit i of the batch, h, with the given cost, soft or not, and
// charged always or not.
func (g *group) add(h *store.Hit, key string, i int, cost int64, soft, always bool) {
	g.keys = append(g.keys, key)
	g.hits = append(g.hits, i)
	flags := int64(0)
	if soft {
		flags |= flagSoft
	}
	if always {
		flags |= flagAlways
		g.always = true
	}
	n := int64(len(g.keys))
	if g.always {
		n = -n
	}
	binary.LittleEndian.PutUint64(g.args, uint64(n))
	for _, x := range [...]int64{int64(h.Limit.Kind), h.Limit.Requests, h.Limit.Burst, h.Limit.Period, cost, flags} {
		g.args = binary.LittleEndian.AppendUint64(g.args, uint64(x))
	}
}

// scripter sends or queues a script call: a client or a pipeline.
type scripter interface {
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *goredis.Cmd
	FCall(ctx context.Context, function string, keys []string, args ...any) *goredis.Cmd
}

// evalSha queues or sends the script call of cl: an FCALL where the
// servers have Redis Functions, else an EVALSHA.
func (s *Store) evalSha(ctx context.Context, to scripter, cl *call) *goredis.Cmd {
	cl.nowArg = cl.nowArg[:0]
	if s.now != nil {
		cl.nowArg = strconv.AppendInt(cl.nowArg, cl.now, 10)
	}
	keys, args := cl.groups[0].keys, cl.groups[0].args
	if len(cl.groups) > 1 {
		cl.keys, cl.args = cl.keys[:0], cl.args[:0]
		for _, g := range cl.groups {
			cl.keys = append(cl.keys, g.keys...)
			cl.args = append(cl.args, g.args...)
		}
		keys, args = cl.keys, cl.args
	}
	if st := s.server.Load(); st != nil && st.functions {
		return to.FCall(ctx, applyFunction, keys, cl.nowArg, s.slack, args)
	}
	return to.EvalSha(ctx, applySHA, keys, cl.nowArg, s.slack, args)
}

// result hands each call of cl its part of the script's reply: now, the
// results of every hit (5 little-endian int64 each), then the group number
// and error message of each failed group.
func (cl *call) result(cmd *goredis.Cmd) {
	if err := cl.parse(cmd); err != nil {
		for _, g := range cl.groups {
			g.res, g.err = g.res[:0], err
		}
	}
}

// parse is result, returning an error when the reply fails or is malformed.
func (cl *call) parse(cmd *goredis.Cmd) error {
	if err := cmd.Err(); err != nil {
		return err
	}
	vals, _ := cmd.Val().([]any)
	if len(vals) < 2 || len(vals)%2 != 0 {
		return fmt.Errorf("script returned %T of %d values, want now, results and failures", cmd.Val(), len(vals))
	}
	now, ok1 := vals[0].(int64)
	res, ok2 := vals[1].(string)
	if !ok1 || !ok2 || len(res) != 8*5*cl.hits {
		return fmt.Errorf("script returned %T and %T of %d bytes for %d hits", vals[0], vals[1], len(res), cl.hits)
	}
	for _, g := range cl.groups {
		g.decidedAt, g.err = now, nil
		g.res = g.res[:0]
		for range 5 * len(g.keys) {
			g.res = append(g.res, int64(binary.LittleEndian.Uint64([]byte(res[:8]))))
			res = res[8:]
		}
	}
	for f := vals[2:]; len(f) > 0; f = f[2:] {
		n, ok1 := f[0].(int64)
		msg, ok2 := f[1].(string)
		if !ok1 || !ok2 || n < 1 || n > int64(len(cl.groups)) {
			return fmt.Errorf("script returned a failure of %T %T", f[0], f[1])
		}
		cl.groups[n-1].err = errors.New(msg)
	}
	return nil
}

// verdict decodes the script's five integers for one hit. The first is 1
// for an admitted hit, 0 for a rejected one, and 2 for one rejected by a
// penalty's cooldown.
func verdict(res []int64) algorithm.Verdict {
	return algorithm.Verdict{
		Allowed:    res[0] == 1,
		Penalized:  res[0] == 2,
		Remaining:  res[1],
		ResetAfter: time.Duration(res[2]) * time.Microsecond,
		RetryAfter: time.Duration(res[3]) * time.Microsecond,
		Limit:      res[4],
	}
}
