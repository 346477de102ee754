package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		name      string
		info      string
		want      string
		supported bool
		functions bool
		err       string
	}{
		{"redis 6.2.0", "# Server\r\nredis_version:6.2.0\r\nredis_mode:standalone\r\n", "Redis 6.2.0", true, false, ""},
		{"redis 6.0.16", "# Server\r\nredis_version:6.0.16\r\n", "Redis 6.0.16", false, false, ""},
		{"redis 7.0.15", "# Server\r\nredis_version:7.0.15\r\n", "Redis 7.0.15", true, true, ""},
		{"redis 5.0", "redis_version:5.0\r\n", "Redis 5.0.0", false, false, ""},
		{"valkey 8.0.1", "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n", "Valkey 8.0.1", true, true, ""},
		{"missing", "# Server\r\nredis_mode:standalone\r\n", "", false, false, "INFO server reports no redis_version"},
		{"malformed", "redis_version:seven\r\n", "", false, false, `INFO server reports version "seven", want major.minor.patch`},
		{"too many parts", "redis_version:7.0.15.1\r\n", "", false, false, `INFO server reports version "7.0.15.1", want major.minor.patch`},
		{"negative", "redis_version:7.-1.0\r\n", "", false, false, `INFO server reports version "7.-1.0", want major.minor.patch`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := parseVersion(tt.info)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("parseVersion = %v, %v; want error %q", v, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseVersion: %v", err)
			}
			if v.String() != tt.want || v.supported() != tt.supported || v.functions() != tt.functions {
				t.Errorf("parseVersion = %s (supported %t, functions %t), want %s (%t, %t)",
					v, v.supported(), v.functions(), tt.want, tt.supported, tt.functions)
			}
		})
	}
}

// TestVersionGate checks that a server older than Redis 6.2 makes every
// Apply fail with ErrUnsupportedVersion, which wraps store.ErrUnavailable
// so the rules' failure modes answer, that the error names the version
// found and the minimum, that the log says so once, and that the version
// is not read again on every request.
func TestVersionGate(t *testing.T) {
	srv := redistest.StartFake(t, "6.0.9")
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	var logs logtest.Buffer
	s, err := New(Options{Client: client, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	want := fmt.Sprintf("store unavailable: unsupported server version: Redis 6.0.9 at %s is older than the minimum, Redis 6.2 (or Valkey 7.2)", srv.Addr)
	l := algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 10, Period: time.Second.Microseconds()}
	for i := range 20 {
		hits := []store.Hit{{Domain: "d", Entries: []store.Entry{{Key: "k", Value: "v"}}, Limit: l, Cost: 1}}
		err := s.Apply(context.Background(), hits, make([]algorithm.Verdict, 1))
		if !errors.Is(err, ErrUnsupportedVersion) || !errors.Is(err, store.ErrUnavailable) || err.Error() != want {
			t.Fatalf("Apply %d = %v, want %q", i, err, want)
		}
	}
	if err := s.ServerError(); err == nil || err.Error() != want {
		t.Errorf("ServerError = %v, want %q", err, want)
	}
	if n := strings.Count(logs.String(), "redis server too old"); n != 1 {
		t.Errorf("logged the old server %d times, want once:\n%s", n, logs.String())
	}
	if infos := srv.Infos(); infos > 2 {
		t.Errorf("INFO asked %d times for 20 Applies within a second, want at most 2 (at start and once more)", infos)
	}
}
