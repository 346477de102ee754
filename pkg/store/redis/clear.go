package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/pkg/store"
)

// Clear deletes the key of every counter (see "Clearing counters" in
// package store): one key per counter whatever its algorithm, so the next
// hit finds it empty, and the key of its penalty state, so a reset client
// is forgiven too. The DELs go in one pipeline, which a Cluster
// client splits by node. A failure wraps store.ErrUnavailable.
func (s *Store) Clear(ctx context.Context, counters []store.Hit) error {
	if len(counters) == 0 {
		return nil
	}
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return errClosed
	}
	_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i := range counters {
			key, _ := Key(s.prefix, &counters[i])
			p.Del(ctx, key, key+penaltySuffix)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: clearing %d counters in redis: %w", store.ErrUnavailable, len(counters), err)
	}
	return nil
}
