package cached

import "github.com/tollgatehq/tollgate/pkg/store"

// Unspent returns the unspent hits this Store holds in leases.
func (s *Store) Unspent() int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, c := range sh.m {
			n += c.room()
		}
		sh.mu.Unlock()
	}
	return n
}

// Held returns the unspent hits this Store holds on h's counter.
func (s *Store) Held(h store.Hit) int64 {
	key := s.key(&h)
	sh := &s.shards[key%shardCount]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c := sh.m[key]; c != nil {
		return c.room()
	}
	return 0
}

// Decisions returns the hits decided locally (from a lease, or over the
// limit) and with I/O (after a reservation, or strictly).
func (s *Store) Decisions() (local, io int64) {
	p := &s.m.paths
	return p[pathLocal].Load() + p[pathOverLimit].Load(), p[pathRenewalWait].Load() + p[pathStrict].Load()
}
