package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgatehq/tollgate/pkg/store"
)

// senders is the number of batches in flight at once. While all are out,
// groups queue and leave together in the next one.
const senders = 4

// batcher collects the slot groups of concurrent Applies and sends
// each batch in one round trip, the groups of one slot merged into one
// script call (see Store.send): a collector goroutine forms batches and
// hands each to one of the sender goroutines.
//
// An Apply that finds nothing in flight and nothing queued sends its own
// groups from its own goroutine, as if batching were off, so an idle store
// adds no hand-offs to the round trip. (Only with a client that honours
// context deadlines: otherwise the caller could not leave when its context
// ends.) Calls that arrive meanwhile queue; the collector waits up to
// window for more while batches are in flight (or until max), and when
// every sender is busy the groups wait in the queue and join the next batch.
type batcher struct {
	s      *Store
	window time.Duration
	max    int
	// direct allows the idle fast path.
	direct bool

	queue    chan *group   // closed by close
	batches  chan []*group // closed by the collector once queue is drained
	inflight atomic.Int32  // batches being sent
	forming  atomic.Bool   // the collector holds groups
	free     sync.Pool     // *[]*group
}

func newBatcher(s *Store, window time.Duration, maxBatch int, direct bool) *batcher {
	b := &batcher{
		s:       s,
		window:  window,
		max:     maxBatch,
		direct:  direct,
		queue:   make(chan *group, 4*maxBatch),
		batches: make(chan []*group),
	}
	b.free.New = func() any {
		batch := make([]*group, 0, maxBatch)
		return &batch
	}
	return b
}

// start starts the goroutines; wg.Wait returns once close has been called
// and every queued call has been answered.
func (b *batcher) start(wg *sync.WaitGroup) {
	wg.Go(b.collect)
	for range senders {
		wg.Go(b.send)
	}
}

// close makes the collector send what has queued and stop; the Store has
// made sure no Apply enqueues any more.
func (b *batcher) close() { close(b.queue) }

// enqueue hands groups to the collector, giving up when ctx ends, or runs
// them at once when the store is idle. It reports whether it ran them.
func (b *batcher) enqueue(ctx context.Context, groups []*group) (ran bool, err error) {
	s := b.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		s.metrics.failed(ctx, s.metrics.closedError)
		return false, errClosed
	}
	if b.direct && len(b.queue) == 0 && !b.forming.Load() && b.inflight.CompareAndSwap(0, 1) {
		s.run(ctx, groups)
		b.inflight.Add(-1)
		return true, nil
	}
	for _, g := range groups {
		g.ctx = ctx
		select {
		case b.queue <- g:
		case <-ctx.Done():
			s.metrics.failed(ctx, s.metrics.contextError)
			return false, fmt.Errorf("%w: %w", store.ErrUnavailable, ctx.Err())
		}
	}
	return false, nil
}

// collect forms batches until the queue is closed and drained.
func (b *batcher) collect() {
	defer close(b.batches)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		first, ok := <-b.queue
		if !ok {
			return
		}
		b.forming.Store(true)
		batch := append((*b.free.Get().(*[]*group))[:0], first)
		batch, open := b.drain(batch)
		if open && b.window > 0 && len(batch) < b.max && b.inflight.Load() > 0 {
			timer.Reset(b.window)
		wait:
			for len(batch) < b.max {
				select {
				case g, ok := <-b.queue:
					if !ok {
						open = false
						break wait
					}
					batch = append(batch, g)
					if batch, open = b.drain(batch); !open {
						break wait
					}
				case <-timer.C:
					break wait
				}
			}
			timer.Stop()
		}
		b.batches <- batch
		b.forming.Store(false)
		if !open {
			return
		}
	}
}

// drain appends the groups already queued, up to max, and reports whether
// the queue is still open.
func (b *batcher) drain(batch []*group) ([]*group, bool) {
	for len(batch) < b.max {
		select {
		case g, ok := <-b.queue:
			if !ok {
				return batch, false
			}
			batch = append(batch, g)
		default:
			return batch, true
		}
	}
	return batch, true
}

// send sends batches until the collector stops.
func (b *batcher) send() {
	for batch := range b.batches {
		b.inflight.Add(1)
		b.sendBatch(batch)
		b.inflight.Add(-1)
		clear(batch)
		batch = batch[:0]
		b.free.Put(&batch)
	}
}

// sendBatch runs the groups of a batch whose callers still wait, with the
// latest of their deadlines, and answers every call.
func (b *batcher) sendBatch(batch []*group) {
	live := batch[:0] // filtered in place: the batch is not read again
	var deadline time.Time
	bounded := true
	for _, g := range batch {
		if err := g.ctx.Err(); err != nil {
			g.err = err
			g.done <- struct{}{}
			continue
		}
		live = append(live, g)
		if d, ok := g.ctx.Deadline(); !ok {
			bounded = false
		} else if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if bounded {
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	b.s.run(ctx, live)
	cancel()
	for _, g := range live {
		g.done <- struct{}{}
	}
}
