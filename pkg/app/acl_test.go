package app_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/fleet"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

const (
	// readmeACLMarker introduces the README's block of ACL SETUSER lines.
	readmeACLMarker = "<!-- checked by pkg/app/acl_test.go: tollgate's redis user -->"
	// readmeACLUser and readmeACLPassword are the user the block sets up
	// and the placeholder of its password.
	readmeACLUser, readmeACLPassword = "tollgate", "CHANGE-ME"
)

// readmeACL returns the ACL SETUSER commands of the README's block for
// tollgate's Redis user, each split into arguments, with password in place
// of the placeholder.
func readmeACL(t *testing.T, password string) [][]string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), readmeACLMarker)
	if !ok {
		t.Fatalf("README.md has no %q", readmeACLMarker)
	}
	lines := strings.Split(rest, "\n")
	start := 1
	if len(lines) < 2 || strings.TrimSpace(lines[start]) != "```" {
		t.Fatalf("README.md: no code block after %q", readmeACLMarker)
	}
	var cmds [][]string
	for _, line := range lines[start+1:] {
		line = strings.TrimSpace(line)
		if line == "```" {
			return cmds
		}
		args := strings.Fields(line)
		if len(args) < 3 || args[0] != "ACL" || args[1] != "SETUSER" || args[2] != readmeACLUser {
			t.Fatalf("README.md: %q is not an ACL SETUSER of %s", line, readmeACLUser)
		}
		for i, a := range args {
			args[i] = strings.ReplaceAll(a, ">"+readmeACLPassword, ">"+password)
		}
		cmds = append(cmds, args)
	}
	t.Fatal("README.md: the ACL block does not end")
	return nil
}

func TestRedisUserACLStandalone(t *testing.T) {
	srv := redistest.StartStandalone(t)
	testRedisUserACL(t, "single", []*redistest.Server{srv}, []string{srv.Addr})
}

func TestRedisUserACLCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	// What the README adds for a Cluster: go-redis reads the slot map and
	// the commands' key positions.
	testRedisUserACL(t, "cluster", c.Masters, c.Addrs(), "+cluster|slots", "+command")
}

// testRedisUserACL gives tollgate the Redis user the README documents, on
// every one of servers (plus the rules of extra), and runs the workload of
// testOverridesFleet as that user with the default key prefix: decisions,
// overrides and their expiry, a reset, the fleet channel; then a fleet
// subscription long enough quiet to ping. Redis must have refused nothing:
// ACL LOG stays empty.
func testRedisUserACL(t *testing.T, redisType string, servers []*redistest.Server, addrs []string, extra ...string) {
	const password = "acl-user-pw-71c2"
	for _, srv := range servers {
		for _, cmd := range readmeACL(t, password) {
			srv.Do(cmd...)
		}
		if len(extra) > 0 {
			srv.Do(append([]string{"ACL", "SETUSER", readmeACLUser}, extra...)...)
		}
		srv.Do("ACL", "LOG", "RESET")
	}
	asUser := func(s *app.Settings) {
		s.Redis.KeyPrefix, s.Redis.Username, s.Redis.Password = redis.DefaultKeyPrefix, readmeACLUser, app.Secret(password)
	}
	testOverridesFleet(t, redisType, addrs, asUser)

	t.Run("quiet subscription", func(t *testing.T) {
		client, err := redis.NewClient(redis.ClientConfig{Type: redisType, Addrs: addrs, Username: readmeACLUser, Password: password})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		bus, err := fleet.New(fleet.Options{Client: client, Channel: redis.DefaultKeyPrefix + ".fleet", HealthCheck: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		pings := func() (n int64) {
			for _, srv := range servers {
				n += commandCalls(t, srv, "ping")
			}
			return n
		}
		before := pings()
		var resyncs atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() {
			bus.Run(ctx, func(_ context.Context, e fleet.Event) {
				if e.Resync {
					resyncs.Add(1)
				}
			})
		})
		defer wg.Wait()
		defer cancel()
		polltest.Eventually(t, 5*time.Second, func() bool { return pings() >= before+3 }, "the quiet subscription does not ping")
		if n := resyncs.Load(); n != 1 {
			t.Errorf("subscribed %d times, want once: a ping was refused", n)
		}
	})

	for _, srv := range servers {
		if entries, _ := srv.Do("ACL", "LOG").([]any); len(entries) > 0 {
			t.Errorf("ACL LOG of %s holds %d refusals:\n%s", srv.Addr, len(entries), fmt.Sprint(entries...))
		}
	}
}

// commandCalls returns how many times srv has run command, from INFO
// commandstats.
func commandCalls(t *testing.T, srv *redistest.Server, command string) int64 {
	t.Helper()
	info, _ := srv.Do("INFO", "commandstats").(string)
	for line := range strings.Lines(info) {
		stats, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(stats, ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats of %s: %q", srv.Addr, line)
		}
		return n
	}
	return 0
}
