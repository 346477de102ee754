package memory

import (
	"context"
	"fmt"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// Reserve grants leases[i] for reqs[i] with algorithm.Reserve, each under
// its shard's lock and charged to the counter at once, so the memory store
// can stand for a shared counter that instances lease budgets from. Like
// Apply it never blocks on anything but its own locks, so ctx is not
// consulted. len(leases) must equal len(reqs).
func (s *Store) Reserve(_ context.Context, reqs []store.LeaseRequest, leases []algorithm.Lease) error {
	if len(leases) != len(reqs) {
		return fmt.Errorf("memory store: %d leases for %d lease requests", len(leases), len(reqs))
	}
	for i := range reqs {
		r := &reqs[i]
		key := s.key(&r.Counter)
		sh := &s.shards[key>>s.shift]
		now := s.now()
		sh.mu.Lock()
		state, found := sh.load(r.Counter.Limit.Kind, key)
		next, lease := algorithm.Reserve(r.Counter.Limit, state, now, r.Want, r.Lifetime.Microseconds())
		if lease.Hits > 0 {
			sh.save(r.Counter.Limit, key, next, found, now, s.perShard)
		}
		sh.mu.Unlock()
		leases[i] = lease
	}
	return nil
}

// Return gives back the unspent hits of leases with algorithm.Return, each
// under its shard's lock.
func (s *Store) Return(_ context.Context, returns []store.LeaseReturn) error {
	for i := range returns {
		r := &returns[i]
		key := s.key(&r.Counter)
		sh := &s.shards[key>>s.shift]
		now := s.now()
		sh.mu.Lock()
		state, found := sh.load(r.Counter.Limit.Kind, key)
		if found {
			sh.save(r.Counter.Limit, key, algorithm.Return(r.Counter.Limit, state, now, r.Lease, r.Unspent), found, now, s.perShard)
		}
		sh.mu.Unlock()
	}
	return nil
}
