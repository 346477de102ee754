package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/top"
	topredis "github.com/tollgatehq/tollgate/pkg/top/redis"
)

var perMinute = &descriptor.Limit{Name: "per_key", Unit: descriptor.Minute, UnitMultiplier: 1, RequestsPerUnit: 100}

// instance is a recorder and its fleet on one Redis.
type instance struct {
	rec   *top.Recorder
	fleet *topredis.Fleet
}

func newInstance(t *testing.T, client goredis.UniversalClient, name string, opts topredis.Options) *instance {
	t.Helper()
	opts.Client, opts.Instance, opts.KeyPrefix = client, name, "t"
	f, err := topredis.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := top.New(top.Options{Capacity: 8, Instance: name, Peers: f})
	if err != nil {
		t.Fatal(err)
	}
	return &instance{rec: rec, fleet: f}
}

func (in *instance) record(value string, n int, rejected bool) {
	for range n {
		in.rec.Record(time.Now(), "api", "api_key", "per_key", perMinute, []descriptor.Entry{{Key: "api_key", Value: value}}, 1, rejected)
	}
}

func standalone(t *testing.T) goredis.UniversalClient {
	t.Helper()
	client := goredis.NewClient(&goredis.Options{Addr: redistest.StartStandalone(t).Addr})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// TestFleet checks that each instance answers for both, that the
// answer says so, and that an instance that stops publishing drops out
// within its TTL, and one whose Run ends at once.
func TestFleet(t *testing.T) {
	client := standalone(t)
	ctx := context.Background()
	opts := topredis.Options{Interval: 100 * time.Millisecond, TTL: 500 * time.Millisecond}
	a, b := newInstance(t, client, "a", opts), newInstance(t, client, "b", opts)
	a.record("x", 5, true)
	b.record("x", 3, false)
	b.record("y", 4, true)
	for _, in := range []*instance{a, b} {
		if err := in.fleet.Publish(ctx, in.rec.Snapshot()); err != nil {
			t.Fatal(err)
		}
	}
	ttl, err := client.PTTL(ctx, "t{%top}i:a").Result()
	if err != nil || ttl <= 0 || ttl > opts.TTL {
		t.Fatalf("the key of a has TTL %v, %v; want at most %v", ttl, err, opts.TTL)
	}
	for _, in := range []*instance{a, b} {
		ans, err := in.rec.Top(ctx, top.Query{By: top.ByRequests, Window: top.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if got := describe(ans); got != "2 instances: x 8 5, y 4 4" {
			t.Errorf("%s answers %s", in.rec.Instance(), got)
		}
	}
	// b stops publishing: gone from a's answers within its TTL.
	start := time.Now()
	polltest.Eventually(t, 2*opts.TTL, func() bool {
		ans, err := a.rec.Top(ctx, top.Query{By: top.ByRequests, Window: top.Minute})
		return err == nil && describe(ans) == "1 instances: x 5 5"
	}, "b does not drop out of a's answers")
	if waited := time.Since(start); waited > opts.TTL+100*time.Millisecond {
		t.Errorf("b dropped out after %v, over its TTL of %v", waited, opts.TTL)
	}

	// Run publishes at once and removes the key when it ends.
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { b.fleet.Run(rctx, b.rec) })
	polltest.Eventually(t, time.Second, func() bool {
		peers, err := a.fleet.Peers(ctx)
		return err == nil && len(peers) == 1 && peers[0].Instance == "b"
	}, "Run does not publish")
	cancel()
	wg.Wait()
	if n, err := client.Exists(ctx, "t{%top}i:b").Result(); err != nil || n != 0 {
		t.Errorf("b's key is still there after Run: %d, %v", n, err)
	}
}

// describe returns the number of instances and each entry's value,
// requests and rejections.
func describe(ans *top.Answer) string {
	parts := []string{fmt.Sprintf("%d instances:", ans.Instances)}
	for i, e := range ans.Entries {
		sep := ","
		if i == len(ans.Entries)-1 {
			sep = ""
		}
		parts = append(parts, fmt.Sprintf("%s %d %d%s", e.Descriptor[0].Value, e.Requests, e.Rejected, sep))
	}
	return strings.Join(parts, " ")
}

// TestFleetBounds checks that a snapshot over MaxBytes is published
// pruned, one too large even then is not, and that Peers skips values
// that are too large or do not decode.
func TestFleetBounds(t *testing.T) {
	client := standalone(t)
	ctx := context.Background()
	a := newInstance(t, client, "a", topredis.Options{MaxBytes: 300})
	b := newInstance(t, client, "b", topredis.Options{MaxBytes: 300})
	for i := range 8 {
		a.record(fmt.Sprintf("value-%02d", i), i+1, false)
	}
	full, _ := a.rec.Snapshot().MarshalBinary()
	if len(full) <= 300 {
		t.Fatalf("the snapshot is %d bytes: not over the bound", len(full))
	}
	if err := a.fleet.Publish(ctx, a.rec.Snapshot()); err != nil {
		t.Fatal(err)
	}
	peers, err := b.fleet.Peers(ctx)
	if err != nil || len(peers) != 1 || peers[0].Capacity >= 8 {
		t.Fatalf("Peers = %v, %v; want a's snapshot pruned", peers, err)
	}
	for i := range 40 {
		a.rec.Record(time.Now(), "api", fmt.Sprintf("rule-%d", i), "", perMinute, []descriptor.Entry{{Key: "k", Value: "v"}}, 1, false)
	}
	if err := a.fleet.Publish(ctx, a.rec.Snapshot()); !errors.Is(err, topredis.ErrTooLarge) {
		t.Errorf("publishing 41 rule identities in 300 bytes: %v", err)
	}
	for key, val := range map[string]string{"t{%top}i:bad": "TGT1garbage", "t{%top}i:big": strings.Repeat("x", 301)} {
		client.Set(ctx, key, val, time.Minute)
		client.ZAdd(ctx, "t{%top}ids", goredis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: strings.TrimPrefix(key, "t{%top}i:")})
	}
	peers, err = b.fleet.Peers(ctx)
	if err != nil || len(peers) != 1 || peers[0].Instance != "a" {
		t.Errorf("Peers = %v, %v; want a's alone", peers, err)
	}
}
