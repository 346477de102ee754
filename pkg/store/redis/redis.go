// Package redis is tollgate's shared store: counters in Redis (standalone,
// Sentinel or Cluster, through a go-redis UniversalClient), so that a limit
// holds across a fleet of instances.
//
// # Decisions
//
// One embedded Lua script (apply.lua) decides a group of hits atomically:
// it mirrors package algorithm's Apply bit for bit, decides the
// always-charged hits, then the others, each in order (a later hit on a key
// sees the earlier one's state), and writes the always-charged hits' new
// states and either every admitted hit's new state or, when a hit that is
// not Soft is rejected, none of them, with a TTL that ends when the
// counter is empty again. One script call carries the groups of several
// Applies (see Batching), each decided by itself. Time comes from the Redis
// server's TIME, read once per call, unless Options.Now is set.
//
// # Servers
//
// The script uses only commands of Redis 6.2 (TestScriptCommands keeps it
// so), the oldest server supported; Valkey qualifies from its first
// release, 7.2. The store reads every server's version (INFO server, each
// node of a Cluster) at start, before it loads the script, and again
// after a network error (a reconnect may reach another server) and
// whenever Redis has lost the script. Where every server has Redis
// Functions (7.0 and up), the script is loaded as a function library and
// called with FCALL, which spares the closures a script body makes on
// every call; on 6.2 it is loaded with SCRIPT LOAD and called with
// EVALSHA, and so it is on any server once the Redis user's ACL has
// refused FUNCTION LOAD or FCALL (logged once). Both come from one Lua
// source. A server older than 6.2 makes
// every Apply fail with ErrUnsupportedVersion (logged once, and reported
// by ServerError), and its version is read again every second.
//
// # State
//
// Each counter is one key (see Key for the names), with a TTL that ends
// when the counter is empty again, or a little later: the TTL only governs
// cleanup, and the state is read from the value alone:
//
//   - token bucket: a string holding one integer, the theoretical arrival
//     time (TAT) in µs;
//   - fixed window: the string "windowStart:count";
//   - sliding-window counter: the string "windowStart:count:previousCount";
//   - sliding-window log: a sorted set of one member per admitted unit,
//     scored by its time in µs.
//
// A counter whose hits carry a penalty (store.Hit.Penalty) has its penalty
// state in one more key, the counter's key followed by "|p" (so in the
// same slot): the string "until:strikes:last:blocked" of
// algorithm.PenaltyState, with a TTL that ends when the client is
// forgiven (algorithm.Penalty.Expiry). The script reads it and writes it
// in the same call as the hit; only a hit's rejection changes it, so an
// admitted hit costs one more GET and no write.
//
// # Groups and what holds across them
//
// All keys of one script call must share a Cluster slot, so a batch is cut
// into slot groups, one script call each. Against a single server
// (standalone or Sentinel) the whole batch is one group, and store.Store's
// all-or-nothing rule holds exactly. Against a Cluster each group is
// all-or-nothing by itself; across groups Apply restores the rule after the
// fact: when some group rejects a hit that is not Soft (or fails), Apply
// refunds, through the same script with negative costs, every hit that the
// other groups charged, and reports those hits as admitted with the
// Remaining and ResetAfter of their counters after the refund. So:
//
//   - a rejected batch has, once Apply returns, charged nothing, except
//     that a refunded token bucket may differ by a microsecond of credit
//     (GCRA rounding) and that a refund lost to the caller's context ending
//     or to an error leaves its charge until the counter expires (erring
//     towards rejecting, never towards admitting);
//   - between the group that charged and its refund, a concurrent request
//     on the same counter may see the charge and be rejected;
//   - hits with a negative cost are refunds, always admitted, and are not
//     undone when another group rejects;
//   - always-charged hits (algorithm.ChargeAlways) are never undone either:
//     in every group they are decided first and take effect whatever the
//     verdict, as store.Store requires.
//
// # Batching
//
// Concurrent Apply calls share round trips and script calls. An Apply that
// finds the store idle sends its slot groups itself, at once; groups that
// arrive while others are in flight queue for a batcher goroutine, which
// waits up to BatchWindow (or until MaxBatch groups) for more and hands
// each batch to one of a few sender goroutines. A batch is one round trip:
// the groups of each slot, in arrival order, go in one script call of at
// most 256 hits (more calls when they hold more, as a pipeline; go-redis
// routes a Cluster pipeline to each node). Inside a call each group is
// still all-or-nothing by itself, a rejection or failure in one never
// touches another, and a group sees the counters as the earlier groups left
// them; the call reads each counter once and writes it once. So an idle
// store adds no latency, and round trips and script calls per decision
// fall as load rises. By how much is measured, not written here:
// BenchmarkApplyKeys (64 concurrent callers on 10 000 token buckets)
// reports roundtrips/op, scriptcalls/op and redis-us/op.
//
// # Leases
//
// Reserve and Return (package cached's Leaser) are algorithm.Reserve and
// algorithm.Return in the same script, on the same keys and state: a lease
// is an admitted hit of its size, and a return a refund under the window
// rules of algorithm.Return. Each travels as a group of its own (see
// lease.go), batched and merged into script calls with Applies. A lease's
// Until comes back on the local clock, never later than on the server's;
// its Window stays on the server's, for Return.
//
// # Errors
//
// Every failure to decide wraps store.ErrUnavailable, so callers can apply
// a rule's failure mode with errors.Is; when the caller's context ends first
// the error also wraps ctx.Err(), and Apply returns at once.
package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// Options configures a Store. Client is required; every other field has a
// working zero value.
type Options struct {
	// Client reaches Redis. A *goredis.ClusterClient makes the store group
	// hits by slot; any other client is taken to be one server. The Store
	// does not close it.
	Client goredis.UniversalClient
	// KeyPrefix starts every key; "" means "tg". It may not hold a brace,
	// which would change the keys' hash tag.
	KeyPrefix string
	// Now is the clock for decisions, read once per batch; nil means the
	// Redis server's TIME, read inside the script, so instance clocks
	// cannot skew counts. Keys expire on the server's clock either way: with
	// Now set, every TTL gets a second of slack so a clock slightly behind
	// the server's never loses a live counter.
	Now func() time.Time
	// BatchWindow is how long the batcher waits for more slot groups while
	// others are in flight: 0 means DefaultBatchWindow, a negative value
	// disables batching (each Apply sends its own groups). A call waits at
	// most the window, and only while other groups are in flight. Without
	// batching, Apply leaves at its context's deadline only if the client
	// honours deadlines (NewClient's clients do).
	BatchWindow time.Duration
	// MaxBatch is the most slot groups (the hits of one Apply in one slot)
	// the batcher sends in one round trip; 0 means DefaultMaxBatch.
	MaxBatch int
	// Logger receives the store's logs; nil discards them.
	Logger *slog.Logger
	// MeterProvider provides the tollgate_redis_* instruments; nil means a
	// no-op provider.
	MeterProvider metric.MeterProvider

	// scriptsOnly makes the store call the script with EVALSHA even where
	// the servers have Redis Functions; for tests of that path.
	scriptsOnly bool
}

const (
	// DefaultKeyPrefix is the key prefix when Options.KeyPrefix is empty.
	DefaultKeyPrefix = "tg"
	// DefaultBatchWindow is the batching window when Options.BatchWindow
	// is 0.
	DefaultBatchWindow = 50 * time.Microsecond
	// DefaultMaxBatch is the batch size limit when Options.MaxBatch is 0.
	DefaultMaxBatch = 128
)

const (
	// clockSlack is the TTL slack, in ms, when Options.Now is set.
	clockSlack = "1000"
	// serverSlack is the TTL slack, in ms, on the server's clock: Redis
	// checks expiry inside a script against its ms clock as the call
	// started, which may be a tick behind the TIME the script reads.
	serverSlack = "1"
	// loadTimeout bounds the script load that New starts.
	loadTimeout = 5 * time.Second
	// inlineHits is the batch size whose key buffers are kept for reuse.
	inlineHits = 16
)

// errClosed reports an Apply after Close.
var errClosed = fmt.Errorf("%w: redis store closed", store.ErrUnavailable)

// Store is a store.Store in Redis. It is safe for concurrent use.
type Store struct {
	client  goredis.UniversalClient
	cluster bool
	prefix  string
	now     func() time.Time
	slack   any // ARGV[2], boxed once
	// scriptsOnly is Options.scriptsOnly.
	scriptsOnly bool
	log         *slog.Logger
	metrics     *metrics
	batch       *batcher // nil when batching is disabled

	prepareMu sync.Mutex
	preparing *preparing
	// server is what the last check found of the servers, nil before it.
	server atomic.Pointer[serverState]
	// stale reports that the servers must be checked again before the next
	// round trip.
	stale atomic.Bool
	// noFunctions reports that the Redis user may not use Redis Functions
	// (FUNCTION LOAD or FCALL), so the script is called with EVALSHA.
	noFunctions atomic.Bool

	requests sync.Pool // *request
	sendings sync.Pool // *sending

	mu     sync.RWMutex
	closed bool
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Clearer = (*Store)(nil)
)

// New returns a Store on opts.Client. It does not wait for Redis: it starts
// loading the script in the background, and Apply loads it again whenever
// Redis answers NOSCRIPT.
func New(opts Options) (*Store, error) {
	if opts.Client == nil {
		return nil, errors.New("no client")
	}
	prefix := opts.KeyPrefix
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("key prefix %q holds a brace, which would change the keys' hash tag", prefix)
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m, err := newMetrics(mp)
	if err != nil {
		return nil, fmt.Errorf("creating metrics: %w", err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	_, cluster := opts.Client.(*goredis.ClusterClient)
	s := &Store{
		client:      opts.Client,
		cluster:     cluster,
		prefix:      prefix,
		now:         opts.Now,
		slack:       serverSlack,
		scriptsOnly: opts.scriptsOnly,
		log:         logger.With("component", "redis"),
		metrics:     m,
	}
	if opts.Now != nil {
		s.slack = clockSlack
	}
	s.requests.New = func() any { return new(request) }
	s.sendings.New = func() any { return new(sending) }

	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if opts.BatchWindow >= 0 {
		window := opts.BatchWindow
		if window == 0 {
			window = DefaultBatchWindow
		}
		maxBatch := opts.MaxBatch
		if maxBatch <= 0 {
			maxBatch = DefaultMaxBatch
		}
		s.batch = newBatcher(s, window, maxBatch, honoursDeadlines(opts.Client))
		s.batch.start(&s.wg)
	}
	s.wg.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, loadTimeout)
		defer cancel()
		if err := s.prepare(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, ErrUnsupportedVersion) {
			s.log.Warn("preparing the decision script failed; retrying on first use", "error", err)
		}
	})
	return s, nil
}

// honoursDeadlines reports whether client bounds its network waits by a
// context's deadline.
func honoursDeadlines(client goredis.UniversalClient) bool {
	switch cl := client.(type) {
	case *goredis.Client:
		return cl.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		return cl.Options().ContextTimeoutEnabled
	}
	return false
}

// Close stops the batcher after it has sent every queued call, waits for
// its goroutines, and makes later Applies fail. It does not close the
// client.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	if s.batch != nil {
		s.batch.close()
	}
	s.wg.Wait()
	return nil
}

// Apply implements store.Store; see the package documentation for what
// holds across slot groups. Apply returns as soon as ctx ends.
func (s *Store) Apply(ctx context.Context, hits []store.Hit, verdicts []algorithm.Verdict) error {
	_, err := s.apply(ctx, hits, verdicts)
	return err
}

// ApplyAt is Apply, also returning the instant, in µs, at which the script
// decided the batch's first slot group: the Redis server's TIME when
// Options.Now is nil. A caller that judges decisions on the store's clock
// (the tests of a whole fleet) places a hit decided in Redis there rather
// than at the end of a call that took a round trip longer.
func (s *Store) ApplyAt(ctx context.Context, hits []store.Hit, verdicts []algorithm.Verdict) (int64, error) {
	return s.apply(ctx, hits, verdicts)
}

// apply is Apply, also returning the instant (µs) the first slot group was
// decided at.
func (s *Store) apply(ctx context.Context, hits []store.Hit, verdicts []algorithm.Verdict) (decidedAt int64, err error) {
	if len(verdicts) != len(hits) {
		return 0, fmt.Errorf("redis store: %d verdicts for %d hits", len(verdicts), len(hits))
	}
	if len(hits) == 0 {
		return 0, nil
	}
	var now int64
	if s.now != nil {
		now = algorithm.Micros(s.now())
	}
	r := s.requests.Get().(*request)
	r.build(s, hits, now)
	if err := s.exec(ctx, r.groups); err != nil {
		// Calls may still be in flight: r is not reused.
		return 0, err
	}
	decidedAt = r.groups[0].decidedAt
	rejected, failed := r.verdicts(hits, verdicts)
	if (rejected || failed != nil) && len(r.groups) > 1 {
		if err := s.refund(ctx, r, hits, verdicts, now); err != nil {
			if failed == nil {
				return 0, err
			}
			s.log.Warn("refunding the other slot groups of a failed batch failed", "error", err)
		}
	}
	s.requests.Put(r)
	if failed != nil {
		return 0, s.unavailable(ctx, failed, "deciding")
	}
	return decidedAt, nil
}

// unavailable counts the failure of a call made doing something and
// returns it wrapping store.ErrUnavailable.
func (s *Store) unavailable(ctx context.Context, failed error, doing string) error {
	s.metrics.failed(ctx, s.metrics.redisError)
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) && !errors.Is(failed, context.DeadlineExceeded) {
		// go-redis ends a read at the context's deadline with a plain i/o
		// timeout; say which deadline it was.
		failed = fmt.Errorf("%w: %w", context.DeadlineExceeded, failed)
	}
	if errors.Is(failed, store.ErrUnavailable) {
		return failed
	}
	return fmt.Errorf("%w: %s in redis: %w", store.ErrUnavailable, doing, failed)
}

// verdicts fills verdicts from the results of r's groups, reporting whether
// a hit that is not Soft was rejected and the error of a call that failed.
func (r *request) verdicts(hits []store.Hit, verdicts []algorithm.Verdict) (rejected bool, failed error) {
	for _, g := range r.groups {
		if g.err != nil {
			failed = g.err
			continue
		}
		for k, i := range g.hits {
			if i < 0 {
				continue // a penalty record
			}
			v := verdict(g.res[5*k:])
			verdicts[i] = v
			if !v.Allowed && !hits[i].Soft {
				rejected = true
				g.rejected = true
			}
		}
	}
	return rejected, failed
}

// refund gives back what the committed groups of r charged: every admitted
// hit with a positive cost of a group that rejected nothing and did not
// fail, except the always-charged ones, which store.Store never undoes.
// Each such hit then reports its counter after the refund.
func (s *Store) refund(ctx context.Context, r *request, hits []store.Hit, verdicts []algorithm.Verdict, now int64) error {
	var refunds []*group
	for _, g := range r.groups {
		if g.err != nil || g.rejected {
			continue
		}
		var rg *group
		for k, i := range g.hits {
			// An always-charged hit is never given back.
			if i < 0 || !verdicts[i].Allowed || hits[i].Cost <= 0 || hits[i].Limit.Charge == algorithm.ChargeAlways {
				continue
			}
			if rg == nil {
				rg = r.newGroup(now, g.slot)
				refunds = append(refunds, rg)
			}
			rg.add(&hits[i], g.keys[k], i, -hits[i].Cost, true, false)
		}
		if rg == nil {
			continue
		}
		// A check of each refunded hit after all the refunds, so that a
		// counter hit twice reports its state after both. The checks are
		// soft: one that fails must not roll the refunds back.
		n := len(rg.hits)
		for k := range n {
			i := rg.hits[k]
			rg.add(&hits[i], rg.keys[k], i, 0, true, false)
		}
	}
	if len(refunds) == 0 {
		return nil
	}
	n := 0
	for _, rg := range refunds {
		n += len(rg.hits) / 2
	}
	s.metrics.refunds.Add(ctx, int64(n))
	if err := s.exec(ctx, refunds); err != nil {
		return err
	}
	for _, rg := range refunds {
		if rg.err != nil {
			s.metrics.failed(ctx, s.metrics.redisError)
			return fmt.Errorf("%w: refunding in redis: %w", store.ErrUnavailable, rg.err)
		}
		half := len(rg.hits) / 2
		for k := half; k < len(rg.hits); k++ {
			v := verdict(rg.res[5*k:])
			verdicts[rg.hits[k]] = algorithm.Verdict{Allowed: true, Limit: v.Limit, Remaining: v.Remaining, ResetAfter: v.ResetAfter}
		}
	}
	return nil
}

// exec runs groups, through the batcher or directly, and waits for all of
// them or for ctx to end. Errors of single groups are left in their err.
func (s *Store) exec(ctx context.Context, groups []*group) error {
	if s.batch == nil {
		s.mu.RLock()
		closed := s.closed
		s.mu.RUnlock()
		if closed {
			s.metrics.failed(ctx, s.metrics.closedError)
			return errClosed
		}
		s.run(ctx, groups)
		return s.ctxErr(ctx)
	}
	ran, err := s.batch.enqueue(ctx, groups)
	if err != nil {
		return err
	}
	if ran {
		return s.ctxErr(ctx)
	}
	for _, g := range groups {
		select {
		case <-g.done:
		case <-ctx.Done():
			s.metrics.failed(ctx, s.metrics.contextError)
			return fmt.Errorf("%w: %w", store.ErrUnavailable, ctx.Err())
		}
	}
	return nil
}

// ctxErr returns the error of a call whose caller's context has ended.
func (s *Store) ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		s.metrics.failed(ctx, s.metrics.contextError)
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return nil
}

// group is one slot group of an Apply: the hits of its batch in one slot.
// A script call (type call) carries one or more groups (see send).
type group struct {
	ctx  context.Context // the caller's, set when queued
	slot int             // the keys' slot on a Cluster, else 0
	now  int64           // the Apply's instant in µs, on a client's clock
	keys []string
	// args is the group as ARGV[3] packs it (see apply.lua): the number of
	// hits, then 6 integers per hit, little-endian.
	args []byte
	hits []int // the index in the batch of each key's hit, -1 for a penalty record
	res  []int64
	// decidedAt is the script's now, in µs.
	decidedAt int64
	err       error
	// rejected reports that a hit of the group that is not Soft was
	// rejected, so the group wrote nothing but its always-charged hits.
	rejected bool
	// always reports that a hit of the group is charged always.
	always bool
	done   chan struct{} // receives once the call has run
}

// request holds the groups of one Apply; it is reused through a pool.
type request struct {
	groups []*group
	spare  []*group // groups of earlier uses, to reuse
	buf    []byte   // key scratch
}

// newGroup returns an empty group from r's spares.
func (r *request) newGroup(now int64, slot int) *group {
	var g *group
	if n := len(r.groups); n < len(r.spare) {
		g = r.spare[n]
	} else {
		g = &group{done: make(chan struct{}, 1)}
		r.spare = append(r.spare, g)
	}
	g.ctx, g.slot, g.now = nil, slot, now
	g.keys, g.hits, g.res = g.keys[:0], g.hits[:0], g.res[:0]
	g.args = binary.LittleEndian.AppendUint64(g.args[:0], 0) // the hit count, set by add
	g.err, g.rejected, g.always = nil, false, false
	r.groups = append(r.groups, g)
	return g
}

// build fills r with the groups of a batch: one per slot against a Cluster,
// one in all otherwise.
func (r *request) build(s *Store, hits []store.Hit, now int64) {
	r.groups = r.groups[:0]
	var slotBuf [inlineHits]int
	groupSlots := slotBuf[:0]
	for i := range hits {
		h := &hits[i]
		b, start, end := appendKey(append(r.buf[:0], s.prefix...), h)
		r.buf = b
		key := string(b)
		var g *group
		if !s.cluster {
			if len(r.groups) == 0 {
				r.newGroup(now, 0)
			}
			g = r.groups[0]
		} else {
			slot := int(crc16(b[start:end]) % slots)
			for j, cs := range groupSlots {
				if cs == slot {
					g = r.groups[j]
					break
				}
			}
			if g == nil {
				g = r.newGroup(now, slot)
				groupSlots = append(groupSlots, slot)
			}
		}
		if h.Penalty != nil && h.Penalty.Covers(h.Limit, h.Cost) {
			g.addPenalty(h.Penalty, key+penaltySuffix)
		}
		g.add(h, key, i, h.Cost, h.Soft, h.Limit.Charge == algorithm.ChargeAlways)
	}
}
