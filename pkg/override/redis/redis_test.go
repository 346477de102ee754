package redis_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/override"
	overrideredis "github.com/tollgatehq/tollgate/pkg/override/redis"
)

// TestStore checks Put, Load and Delete on a standalone server and a
// cluster: the override's key expires with it, and Load forgets expired
// ones.
func TestStore(t *testing.T) {
	deployments := []struct {
		name   string
		client func(t *testing.T) goredis.UniversalClient
	}{
		{"standalone", func(t *testing.T) goredis.UniversalClient {
			return goredis.NewClient(&goredis.Options{Addr: redistest.StartStandalone(t).Addr})
		}},
		{"cluster", func(t *testing.T) goredis.UniversalClient {
			return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: redistest.StartCluster(t).Addrs()})
		}},
	}
	for _, d := range deployments {
		t.Run(d.name, func(t *testing.T) {
			client := d.client(t)
			t.Cleanup(func() { _ = client.Close() })
			now := time.Now().UTC().Truncate(time.Millisecond)
			clock := now
			s, err := overrideredis.New(overrideredis.Options{Client: client, KeyPrefix: "x", Now: func() time.Time { return clock }})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			mk := func(id string, ttl time.Duration) override.Override {
				return override.Override{ID: id, Domain: "api", Entries: []descriptor.Entry{{Key: "k", Value: id}},
					Multiplier: 2, ExpiresAt: now.Add(ttl), CreatedAt: now, Reason: "r"}
			}
			a, b, c := mk("a", time.Hour), mk("b", 2*time.Hour), mk("c", time.Minute)
			for _, o := range []override.Override{a, b, c} {
				if err := s.Put(ctx, o); err != nil {
					t.Fatalf("Put: %v", err)
				}
			}
			ttl, err := client.PTTL(ctx, "x{%overrides}o:a").Result()
			if err != nil || ttl <= 59*time.Minute || ttl > time.Hour {
				t.Fatalf("the key of a has TTL %v, %v; want about an hour", ttl, err)
			}
			got, err := s.Load(ctx)
			if err != nil || len(got) != 3 {
				t.Fatalf("Load = %+v, %v", got, err)
			}
			if deleted, err := s.Delete(ctx, "b"); err != nil || !reflect.DeepEqual(deleted, b) {
				t.Fatalf("Delete = %+v, %v; want b", deleted, err)
			}
			if _, err := s.Delete(ctx, "b"); !errors.Is(err, override.ErrNotFound) {
				t.Fatalf("Delete again = %v, want %v", err, override.ErrNotFound)
			}
			clock = now.Add(time.Minute) // c expires for the index
			got, err = s.Load(ctx)
			if err != nil || !reflect.DeepEqual(got, []override.Override{a}) {
				t.Fatalf("Load = %+v, %v; want a", got, err)
			}
			if n, _ := client.ZCard(ctx, "x{%overrides}ids").Result(); n != 1 {
				t.Fatalf("the index holds %d ids, want 1", n)
			}
			if err := s.Put(ctx, mk("old", -time.Second)); !errors.Is(err, override.ErrInvalid) {
				t.Fatalf("Put of an expired override = %v, want %v", err, override.ErrInvalid)
			}
		})
	}
}

// TestLoadSkipsBadRecords writes a record that does not decode beside a
// good one: Load returns the good one and logs the bad one's id, rather
// than failing every read of the overrides.
func TestLoadSkipsBadRecords(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: redistest.StartStandalone(t).Addr})
	t.Cleanup(func() { _ = client.Close() })
	now := time.Now().UTC().Truncate(time.Millisecond)
	var logs logtest.Buffer
	s, err := overrideredis.New(overrideredis.Options{Client: client, KeyPrefix: "x", Now: func() time.Time { return now },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	good := override.Override{ID: "good", Domain: "api", Entries: []descriptor.Entry{{Key: "k", Value: "v"}},
		Multiplier: 2, ExpiresAt: now.Add(time.Hour), CreatedAt: now}
	bad := good
	bad.ID = "bad"
	for _, o := range []override.Override{good, bad} {
		if err := s.Put(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.Set(ctx, "x{%overrides}o:bad", `{"id":"bad","multiplier":"two"`, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx)
	if err != nil || !reflect.DeepEqual(got, []override.Override{good}) {
		t.Fatalf("Load = %+v, %v; want the good override alone", got, err)
	}
	if !strings.Contains(logs.String(), "override record in redis does not decode; skipped") || !strings.Contains(logs.String(), "id=bad") {
		t.Errorf("the bad record is not logged:\n%s", logs.String())
	}
}
