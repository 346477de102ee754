package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// TestMaxmemoryPolicy fills a Redis capped by maxmemory with counters,
// under the policy the README recommends and under Redis's default, and
// checks what the README says of each: with volatile-ttl every decision
// succeeds and Redis evicts counters; with noeviction decisions fail (OOM)
// once memory is full, so the rules' failure modes answer.
func TestMaxmemoryPolicy(t *testing.T) {
	const (
		batch   = 100
		batches = 100 // 10 000 token buckets, above a megabyte
		room    = 256 << 10
	)
	for _, tc := range []struct {
		policy string
		full   bool // decisions fail once memory is full
	}{
		{"volatile-ttl", false},
		{"noeviction", true},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := redistest.StartStandalone(t)
			client, err := redis.NewClient(redis.ClientConfig{Addrs: []string{srv.Addr}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Close() })
			s := newStore(t, redis.Options{Client: client})
			l := limit(algorithm.TokenBucket, 10, time.Hour)
			apply(t, s, hit("warm-up", l, 1))
			srv.Do("CONFIG", "SET", "maxmemory", strconv.FormatInt(redistest.UsedMemory(t, srv.Addr)+room, 10))
			srv.Do("CONFIG", "SET", "maxmemory-policy", tc.policy)

			hits, v := make([]store.Hit, batch), make([]algorithm.Verdict, batch)
			var (
				failed error
				made   int
			)
			for b := range batches {
				for i := range hits {
					hits[i] = hit(strconv.Itoa(b*batch+i), l, 1)
				}
				if failed = s.Apply(context.Background(), hits, v); failed != nil {
					break
				}
				made += batch
			}
			info, _ := srv.Do("INFO", "stats").(string)
			evicted := ""
			for line := range strings.Lines(info) {
				if n, ok := strings.CutPrefix(strings.TrimSpace(line), "evicted_keys:"); ok {
					evicted = n
				}
			}
			t.Logf("%d decisions made, evicted_keys:%s, then %v", made, evicted, failed)
			switch {
			case tc.full && made == 0:
				t.Errorf("the first decisions failed (%v): the cap leaves no room", failed)
			case tc.full && (failed == nil || !errors.Is(failed, store.ErrUnavailable) || !strings.Contains(failed.Error(), "OOM")):
				t.Errorf("filling Redis: %v, want an OOM wrapping store.ErrUnavailable", failed)
			case !tc.full && failed != nil:
				t.Errorf("filling Redis: %v, want every decision made", failed)
			case !tc.full && (evicted == "" || evicted == "0"):
				t.Errorf("evicted_keys:%s, want counters evicted", evicted)
			}
		})
	}
}
