package redis_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// TestFunctionsDeniedByACL runs the store as a Redis user whose ACL allows
// scripts (EVALSHA, SCRIPT LOAD) but not Redis Functions, or not all of
// them: the store must fall back to EVALSHA, say so once in the log, and
// decide as usual.
func TestFunctionsDeniedByACL(t *testing.T) {
	const user, password = "limited", "limited-pw-3f9a"
	base := []string{"ACL", "SETUSER", user, "reset", "on", ">" + password, "~tg*", "resetchannels", "-@all",
		"+info", "+evalsha", "+script|load"}
	for _, c := range redis.ScriptCommands() {
		base = append(base, "+"+strings.ToLower(c))
	}
	srv := redistest.StartStandalone(t)
	for _, tc := range []struct {
		name  string
		allow []string
		// preload loads the library as the default user first, as another
		// instance with more rights may have.
		preload bool
	}{
		{"FUNCTION LOAD and FCALL denied", nil, false},
		{"FUNCTION LOAD denied, library loaded by another user", []string{"+fcall"}, true},
		{"FCALL denied", []string{"+function|load"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.Do("FLUSHALL")
			srv.Do("FUNCTION", "FLUSH")
			srv.Do("SCRIPT", "FLUSH")
			srv.Do(append(base, tc.allow...)...)
			if tc.preload {
				admin, err := redis.NewClient(redis.ClientConfig{Addrs: []string{srv.Addr}})
				if err != nil {
					t.Fatal(err)
				}
				apply(t, newStore(t, redis.Options{Client: admin}), hit("preload", limit(algorithm.TokenBucket, 5, time.Second), 1))
				_ = admin.Close()
			}
			client, err := redis.NewClient(redis.ClientConfig{Addrs: []string{srv.Addr}, Username: user, Password: password})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Close() })
			var logs logtest.Buffer
			s := newStore(t, redis.Options{Client: client, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			l := limit(algorithm.FixedWindow, 2, time.Hour)
			h := hit("acl", l, 1)
			for i, want := range []bool{true, true, false} {
				v := make([]algorithm.Verdict, 1)
				if err := s.Apply(context.Background(), []store.Hit{h}, v); err != nil {
					t.Fatalf("decision %d: %v", i+1, err)
				}
				if v[0].Allowed != want {
					t.Fatalf("decision %d: allowed %v, want %v", i+1, v[0].Allowed, want)
				}
			}
			key, _ := redis.Key(redis.DefaultKeyPrefix, &h)
			if got, _ := srv.Do("GET", key).(string); !strings.HasSuffix(got, ":2") {
				t.Errorf("Redis holds %q at %s, want a count of 2", got, key)
			}
			const said = "the redis user may not use Redis Functions"
			if n := strings.Count(logs.String(), said); n != 1 {
				t.Errorf("the log says %q %d times, want once:\n%s", said, n, logs.String())
			}
		})
	}
}
