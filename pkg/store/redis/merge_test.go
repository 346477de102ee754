package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/metrictest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// TestMergedBatches checks how one script call decides the batches of
// concurrent Applies: each batch all-or-nothing by itself, in arrival
// order, a failure confined to its batch, and at most a few hundred hits
// per call.
func TestMergedBatches(t *testing.T) {
	d := redistest.StandaloneDeployment(t)
	client := d.Client(t)
	five := limit(algorithm.FixedWindow, 5, time.Hour)
	// many returns n hits of cost 1 on distinct counters.
	many := func(n int) []store.Hit {
		hits := make([]store.Hit, n)
		for i := range hits {
			hits[i] = hit("n"+strconv.Itoa(i), five, 1)
		}
		return hits
	}
	type want struct {
		err       string // a substring of the batch's error, or ""
		allowed   []bool
		remaining []int64
	}
	tests := []struct {
		name        string
		batches     [][]store.Hit
		want        []want
		scriptCalls int64
	}{
		{
			name: "a rejected batch charges nothing and leaves the next one alone",
			batches: [][]store.Hit{
				{hit("a", five, 1), hit("b", five, 6)},
				{hit("a", five, 1)},
			},
			want: []want{
				{allowed: []bool{true, false}, remaining: []int64{5, 5}},
				{allowed: []bool{true}, remaining: []int64{4}},
			},
			scriptCalls: 1,
		},
		{
			name: "batches on one counter see each other in order",
			batches: [][]store.Hit{
				{hit("a", five, 2)},
				{hit("a", five, 2)},
				{hit("a", five, 2)},
				{hit("a", five, 1)},
			},
			want: []want{
				{allowed: []bool{true}, remaining: []int64{3}},
				{allowed: []bool{true}, remaining: []int64{1}},
				{allowed: []bool{false}, remaining: []int64{1}},
				{allowed: []bool{true}, remaining: []int64{0}},
			},
			scriptCalls: 1,
		},
		{
			name: "a batch with a key of another type fails alone",
			batches: [][]store.Hit{
				{hit("a", five, 1)},
				{hit("a", five, 1), hit("broken", five, 1)},
				{hit("a", five, 1)},
			},
			want: []want{
				{allowed: []bool{true}, remaining: []int64{4}},
				{err: "WRONGTYPE"},
				{allowed: []bool{true}, remaining: []int64{3}},
			},
			scriptCalls: 1,
		},
		{
			name: "an invalid limit rejects its batch",
			batches: [][]store.Hit{
				{hit("a", five, 1), hit("a", algorithm.Limit{Kind: algorithm.FixedWindow, Requests: 5}, 1)},
				{hit("a", five, 1)},
			},
			want: []want{
				{allowed: []bool{true, false}, remaining: []int64{5, 0}},
				{allowed: []bool{true}, remaining: []int64{4}},
			},
			scriptCalls: 1,
		},
		{
			name:    "a script call takes a few hundred hits at most",
			batches: [][]store.Hit{many(200), many(200), many(40)},
			want: []want{
				{allowed: repeat(true, 200), remaining: repeat[int64](4, 200)},
				{allowed: repeat(true, 200), remaining: repeat[int64](3, 200)},
				{allowed: repeat(true, 40), remaining: repeat[int64](2, 40)},
			},
			scriptCalls: 2,
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := "mb" + strconv.Itoa(i)
			broken := hit("broken", five, 1)
			key, _ := redis.Key(prefix, &broken)
			if err := client.HSet(context.Background(), key, "f", "v").Err(); err != nil {
				t.Fatal(err)
			}
			mp, sum := metrictest.New(t)
			clock := storetest.NewClock(t0)
			s := newStore(t, redis.Options{Client: client, KeyPrefix: prefix, Now: clock.Now, MeterProvider: mp})
			apply(t, s, hit("warm-up", five, 0)) // the script loaded
			calls0 := sum("tollgate_redis_script_calls")

			got := make([][]algorithm.Verdict, len(tt.batches))
			for b := range got {
				got[b] = make([]algorithm.Verdict, len(tt.batches[b]))
			}
			_, errs := redis.ApplyTogether(s, context.Background(), tt.batches, got)
			for b, w := range tt.want {
				if w.err != "" {
					if errs[b] == nil || !strings.Contains(errs[b].Error(), w.err) {
						t.Errorf("batch %d: error %v, want one that contains %q", b, errs[b], w.err)
					}
					continue
				}
				if errs[b] != nil {
					t.Errorf("batch %d: %v", b, errs[b])
					continue
				}
				for i, v := range got[b] {
					if v.Allowed != w.allowed[i] || v.Remaining != w.remaining[i] {
						t.Errorf("batch %d, hit %d: %+v, want Allowed %t and Remaining %d", b, i, v, w.allowed[i], w.remaining[i])
					}
				}
			}
			if n := sum("tollgate_redis_script_calls") - calls0; n != tt.scriptCalls {
				t.Errorf("script calls = %d, want %d", n, tt.scriptCalls)
			}
		})
	}
}

// TestLargeBatch applies batches larger than a script call would merge,
// and larger than Lua's stack, which bounds unpack.
func TestLargeBatch(t *testing.T) {
	d := redistest.StandaloneDeployment(t)
	s := newStore(t, redis.Options{Client: d.Client(t), KeyPrefix: "lb"})
	l := limit(algorithm.TokenBucket, 5, time.Hour)
	hits := make([]store.Hit, 3000)
	for i := range hits {
		hits[i] = hit(fmt.Sprintf("u%d", i%2000), l, 1) // 1000 counters hit twice
	}
	for round := range 2 {
		v := apply(t, s, hits...)
		for i, x := range v {
			var want int64
			switch {
			case i < 1000: // the first of two hits on its counter
				want = int64(5 - 1 - 2*round)
			case i < 2000: // the only hit on its counter
				want = int64(5 - 1 - round)
			default: // the second of two hits
				want = int64(5 - 2 - 2*round)
			}
			if !x.Allowed || x.Remaining != want {
				t.Fatalf("round %d, hit %d: %+v, want admitted with Remaining %d", round, i, x, want)
			}
		}
	}
}

// repeat returns n copies of x.
func repeat[T any](x T, n int) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = x
	}
	return s
}
