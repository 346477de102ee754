package redistest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/polltest"
)

// Sentinel is a master, one replica of it, and three sentinels monitoring
// the master as MasterName with quorum 2, down-after-milliseconds 1000 and
// failover-timeout 3000.
type Sentinel struct {
	// Master and Replica are the roles as started; after a failover ask a
	// sentinel (SENTINEL get-master-addr-by-name) for the current master.
	Master  *Server
	Replica *Server
	// Sentinels are the sentinel processes; they take no password.
	Sentinels []*Server
	// MasterName is the name the master is monitored under: "mymaster".
	MasterName string
}

// StartSentinel starts a master, a replica and three sentinels, and waits
// until the replica is in sync and every sentinel reports the master, its
// replica and the two other sentinels.
func StartSentinel(t testing.TB, opts ...Option) *Sentinel {
	t.Helper()
	o := buildOptions(t, "StartSentinel", func(n int) bool { return n == 1 }, opts)
	bin := lookPath(t, "redis-server")
	start := time.Now()

	st := &Sentinel{MasterName: masterName}
	st.Master = startDataNode(t, bin, o, false, nil)
	host, port, _ := net.SplitHostPort(st.Master.Addr)
	st.Replica = startDataNode(t, bin, o, false, []string{"--replicaof", host, port})
	if err := waitSynced(st.Replica, settleTimeout); err != nil {
		t.Fatalf("redistest: replica %s: %v", st.Replica.Addr, err)
	}

	for range sentinelCount {
		s := startServer(t, bin, "", false, func(dir string, p int) ([]string, error) {
			conf := filepath.Join(dir, "sentinel.conf")
			var b strings.Builder
			fmt.Fprintf(&b, "bind 127.0.0.1\nport %d\ndir %s\nprotected-mode no\ndaemonize no\n", p, dir)
			fmt.Fprintf(&b, "sentinel resolve-hostnames no\n")
			fmt.Fprintf(&b, "sentinel monitor %s %s %s %d\n", masterName, host, port, sentinelQuorum)
			fmt.Fprintf(&b, "sentinel down-after-milliseconds %s 1000\n", masterName)
			fmt.Fprintf(&b, "sentinel failover-timeout %s 3000\n", masterName)
			if o.password != "" {
				fmt.Fprintf(&b, "sentinel auth-pass %s %s\n", masterName, o.password)
			}
			// The sentinel rewrites this file, so it must be writable.
			if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
				return nil, err
			}
			return []string{conf, "--sentinel"}, nil
		})
		st.Sentinels = append(st.Sentinels, s)
	}

	for _, s := range st.Sentinels {
		if err := polltest.Poll(settleTimeout, 50*time.Millisecond, nil, func() error {
			return sentinelReady(s.Addr, st.Master.Addr)
		}); err != nil {
			t.Fatalf("redistest: sentinel %s: %v", s.Addr, err)
		}
	}
	t.Logf("redistest: sentinel setup (master %s) ready in %s", st.Master.Addr, time.Since(start).Round(time.Millisecond))
	return st
}

// sentinelReady checks that the sentinel at addr sees master up with one
// replica and the other sentinels.
func sentinelReady(addr, master string) error {
	v, err := command(addr, "", commandTimeout, "SENTINEL", "MASTER", masterName)
	if err != nil {
		return fmt.Errorf("SENTINEL MASTER: %w", err)
	}
	fields, _ := v.([]any)
	m := make(map[string]string, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		v, _ := fields[i+1].(string)
		m[k] = v
	}
	got := net.JoinHostPort(m["ip"], m["port"])
	want := map[string]string{
		"flags":               "master",
		"num-slaves":          "1",
		"num-other-sentinels": strconv.Itoa(sentinelCount - 1),
	}
	if got != master {
		return fmt.Errorf("monitors %s, want %s", got, master)
	}
	for k, w := range want {
		if m[k] != w {
			return fmt.Errorf("%s is %q, want %q", k, m[k], w)
		}
	}
	return nil
}

// Addrs returns the addresses of the sentinels.
func (s *Sentinel) Addrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, x := range s.Sentinels {
		addrs[i] = x.Addr
	}
	return addrs
}

// Failover has the sentinels fail the master over to the replica while both
// run (SENTINEL FAILOVER), waits until every sentinel names the replica as
// the master, then demotes the old master to a replica of the new one, as
// the sentinels would when they next look at it, and waits until it has
// applied a write made on the new one. Master and Replica keep the roles
// they started in.
func (s *Sentinel) Failover() {
	t := s.Master.t
	t.Helper()
	start := time.Now()
	// A sentinel refuses while it has no fresh word from the replica yet.
	if err := polltest.Poll(settleTimeout, 50*time.Millisecond, nil, func() error {
		_, err := command(s.Sentinels[0].Addr, "", commandTimeout, "SENTINEL", "FAILOVER", s.MasterName)
		return err
	}); err != nil {
		t.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
	want := "[" + strings.Replace(s.Replica.Addr, ":", " ", 1) + "]"
	for _, addr := range s.Addrs() {
		if err := polltest.Poll(settleTimeout, 50*time.Millisecond, nil, func() error {
			v, err := command(addr, "", commandTimeout, "SENTINEL", "get-master-addr-by-name", s.MasterName)
			if got := fmt.Sprint(v); err == nil && got != want {
				err = fmt.Errorf("master is %s, want %s", got, want)
			}
			return err
		}); err != nil {
			t.Fatalf("redistest: sentinel %s after the failover: %v", addr, err)
		}
	}
	// The sentinels demote the old master when they next look at it, up to
	// ten seconds later; do it now, as they would.
	s.Master.ReplicaOf(s.Replica)
	t.Logf("redistest: sentinel failover to %s took %s", s.Replica.Addr, time.Since(start).Round(time.Millisecond))
}
