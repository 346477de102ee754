package loadgen

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// connectTimeout bounds the wait for each connection before the run.
const connectTimeout = 10 * time.Second

// lateThreshold is how long an open-loop request may wait for a free worker
// before it counts as late.
const lateThreshold = time.Millisecond

// Run sends load as opts describe and returns the result. It first connects
// every connection and fails if one cannot connect. If ctx ends during the
// run, Run stops sending, cancels the calls in flight, and returns the
// partial Result together with an error wrapping ctx's cause.
func Run(ctx context.Context, opts Options) (*Result, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	enc, err := newRequestEncoder(o.Domain, o.Descriptors, o.Hits, o.Keys)
	if err != nil {
		return nil, err
	}
	conns, err := connect(ctx, o.Addr, o.TLS, o.Conns)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()

	r := newRunner(o, enc, conns)
	cpuBefore := processCPU()
	total := r.run(ctx)
	cpu := processCPU() - cpuBefore

	h := newHistogram()
	for i := range r.shards {
		h.Merge(r.shards[i].h)
	}
	res := total.result(o, h, r.measureStart, cpu)
	if o.KeyWindow > 0 {
		counters := make([]*keyCounter, len(r.workers))
		for i, w := range r.workers {
			counters[i] = w.keys
		}
		res.KeyCounts = mergeKeyCounts(counters)
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("load run interrupted: %w", context.Cause(ctx))
	}
	return res, nil
}

// connect dials n connections to addr as t says and waits until each is
// ready.
func connect(ctx context.Context, addr string, t rlsclient.TLS, n int) ([]*rlsclient.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conns := make([]*rlsclient.Client, 0, n)
	for range n {
		c, err := rlsclient.DialTLS(addr, t)
		if err == nil {
			conns = append(conns, c)
			err = c.WaitReady(ctx)
		}
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, err
		}
	}
	return conns, nil
}

// runner holds the state shared by the workers of one run.
type runner struct {
	opts     Options
	enc      *requestEncoder
	conns    []*rlsclient.Client
	callOpts []grpc.CallOption
	shards   []histogramShard

	start        time.Time // workers start
	measureStart time.Time // the warm-up ends
	measureEnd   time.Time // sending stops; zero without a Duration
	drainEnd     time.Time // open loop: late requests are abandoned; zero without a Duration

	claimed atomic.Int64 // closed loop: recorded requests started

	workers []*worker

	next      atomic.Int64 // open loop: the next slot to claim
	warmSlots int64        // open loop: slots before this one are warm-up
	endSlot   int64        // open loop: slots from this one on are not sent
}

// newRunner returns a runner for o over conns, with one histogram shard per
// processor at most.
func newRunner(o Options, enc *requestEncoder, conns []*rlsclient.Client) *runner {
	r := &runner{
		opts:     o,
		enc:      enc,
		conns:    conns,
		callOpts: []grpc.CallOption{grpc.ForceCodecV2(wireCodec{})},
		shards:   make([]histogramShard, min(o.Concurrency, max(runtime.GOMAXPROCS(0), 1))),
	}
	for i := range r.shards {
		r.shards[i].h = newHistogram()
	}
	return r
}

// run starts the workers, waits for them and returns their merged counts.
func (r *runner) run(ctx context.Context) *tally {
	o := r.opts
	r.start = time.Now()
	r.measureStart = r.start.Add(o.Warmup)
	if o.Duration > 0 {
		r.measureEnd = r.measureStart.Add(o.Duration)
	}
	if o.Rate > 0 {
		r.warmSlots = r.firstSlotAtOrAfter(o.Warmup)
		r.endSlot = math.MaxInt64
		if o.Requests > 0 {
			r.endSlot = r.warmSlots + o.Requests
		}
		if o.Duration > 0 {
			r.endSlot = min(r.endSlot, r.firstSlotAtOrAfter(o.Warmup+o.Duration))
			r.drainEnd = r.measureEnd.Add(o.Timeout)
		}
	}

	workers := make([]*worker, o.Concurrency)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{
			conn:    r.conns[i%len(r.conns)].Conn(),
			shard:   &r.shards[i%len(r.shards)],
			nextKey: newKeyChooser(o, i),
		}
		if o.KeyWindow > 0 {
			w.keys = &keyCounter{window: max(o.KeyWindow.Microseconds(), 1), counts: map[keyWindow]*KeyCount{}}
		}
		workers[i] = w
		if o.Rate > 0 {
			wg.Go(func() { r.openLoop(ctx, w) })
		} else {
			wg.Go(func() { r.closedLoop(ctx, w) })
		}
	}
	wg.Wait()
	r.workers = workers

	total := &tally{}
	for _, w := range workers {
		total.add(&w.tally)
	}
	if o.Rate > 0 && !r.drainEnd.IsZero() && ctx.Err() == nil {
		// Slots nobody claimed before the drain deadline were never sent.
		claimed := max(min(r.next.Load(), r.endSlot), r.warmSlots)
		total.unsent += r.endSlot - claimed
	}
	return total
}

// worker is one sender and its counts.
type worker struct {
	conn    *grpc.ClientConn
	shard   *histogramShard
	nextKey func() uint64
	x       exchange
	digits  [maxKeyDigits]byte
	keys    *keyCounter // with Options.KeyWindow
	tally
}

// closedLoop sends one request after another until the run ends.
func (r *runner) closedLoop(ctx context.Context, w *worker) {
	done := ctx.Done()
	for {
		select {
		case <-done:
			return
		default:
		}
		now := time.Now()
		if !r.measureEnd.IsZero() && !now.Before(r.measureEnd) {
			return
		}
		recorded := !now.Before(r.measureStart)
		if recorded && r.opts.Requests > 0 && r.claimed.Add(1) > r.opts.Requests {
			return
		}
		r.call(ctx, w, now, recorded)
	}
}

// openLoop claims the next scheduled slot, waits for its time and sends it,
// until the slots or the run end. A slot claimed after its time (every
// worker was busy) is measured from its scheduled time.
func (r *runner) openLoop(ctx context.Context, w *worker) {
	done := ctx.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		i := r.next.Add(1) - 1
		if i >= r.endSlot {
			return
		}
		sched := r.start.Add(r.slotOffset(i))
		recorded := i >= r.warmSlots
		from := sched
		if wait := time.Until(sched); wait > 0 {
			// The worker is free before the slot is due. Timers may fire up
			// to about a millisecond late; that lag is the generator's, not
			// the service's, so latency runs from the actual send.
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-done:
				return
			}
			from = time.Now()
		} else {
			// Every worker was busy when the slot came due: the request
			// waited for the service, and its latency includes the wait.
			select {
			case <-done:
				return
			default:
			}
			now := time.Now()
			if !r.drainEnd.IsZero() && now.After(r.drainEnd) {
				if recorded {
					w.unsent++
				}
				return
			}
			if recorded && now.Sub(sched) > lateThreshold {
				w.late++
			}
		}
		r.call(ctx, w, from, recorded)
	}
}

// call sends one request for the worker's next key; a recorded call's
// latency runs from from to the answer.
func (r *runner) call(ctx context.Context, w *worker, from time.Time, recorded bool) {
	key := w.nextKey()
	w.x.request = r.enc.encode(key, w.digits[:0])
	var sent time.Time
	if w.keys != nil {
		sent = time.Now()
	}
	callCtx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	err := w.conn.Invoke(callCtx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, &w.x, &w.x, r.callOpts...)
	cancel()
	done := time.Now()
	if w.keys != nil && err == nil {
		w.keys.count(key, sent, done, w.x.answer)
	}
	switch {
	case !recorded:
		w.warmup++
	case err != nil && ctx.Err() != nil:
		// The caller ended the run; the service is not at fault.
	default:
		w.record(w.shard, done.Sub(from), done, w.x.answer, err)
	}
}

// slotOffset returns the scheduled time of open-loop slot i after the start.
func (r *runner) slotOffset(i int64) time.Duration {
	return time.Duration(float64(i) * float64(time.Second) / r.opts.Rate)
}

// firstSlotAtOrAfter returns the first open-loop slot scheduled at or after
// d from the start.
func (r *runner) firstSlotAtOrAfter(d time.Duration) int64 {
	i := int64(math.Ceil(d.Seconds() * r.opts.Rate))
	for i > 0 && r.slotOffset(i-1) >= d {
		i--
	}
	for r.slotOffset(i) < d {
		i++
	}
	return i
}

// newKeyChooser returns worker's key source, seeded with (Seed, worker).
func newKeyChooser(o Options, worker int) func() uint64 {
	rng := rand.New(rand.NewPCG(o.Seed, uint64(worker)))
	n := uint64(o.Keys)
	if o.Distribution == Zipf {
		return rand.NewZipf(rng, o.ZipfS, 1, n-1).Uint64
	}
	return func() uint64 { return rng.Uint64N(n) }
}
