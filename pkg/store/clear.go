package store

import (
	"context"
	"errors"
)

// Clearer is a store that can forget counters, so that an operator can
// reset a client.
//
// Clear deletes the counter each Hit counts against (its identity: Domain,
// Entries, Limit.Kind and Limit.Period; Shard places it, as for Apply; Cost
// is ignored). A cleared counter starts again empty, as if it had never
// been hit. Clearing a counter that does not exist is not an error.
// Stores that wrap another (the circuit breaker, the over-limit cache, the
// cached store) forget what they hold of the counters themselves and pass
// the call on; a wrapped store that cannot clear makes them return
// ErrCannotClear.
type Clearer interface {
	Clear(ctx context.Context, counters []Hit) error
}

// ErrCannotClear reports a Clear on a store that cannot forget counters.
var ErrCannotClear = errors.New("store cannot clear counters")

// ClearWrapped clears counters in next, the store a layer wraps, calling
// forget, which drops what the layer itself holds of them, before and
// again after: a batch answered meanwhile cannot leave state behind. It
// returns ErrCannotClear when next cannot clear counters.
func ClearWrapped(ctx context.Context, next Store, counters []Hit, forget func([]Counter)) error {
	c, ok := next.(Clearer)
	if !ok {
		return ErrCannotClear
	}
	ids := make([]Counter, len(counters))
	for i := range counters {
		ids[i] = counters[i].Counter()
	}
	forget(ids)
	err := c.Clear(ctx, counters)
	forget(ids)
	return err
}
