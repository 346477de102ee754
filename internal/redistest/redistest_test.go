package redistest

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/polltest"
)

// do runs one command on addr or fails t.
func do(t *testing.T, addr, password string, args ...string) any {
	t.Helper()
	v, err := command(addr, password, commandTimeout, args...)
	if err != nil {
		t.Fatalf("%s on %s: %v", strings.Join(args, " "), addr, err)
	}
	return v
}

// setReplicated sets key on the master at addr and waits until one replica
// has acknowledged the write, or fails t. WAIT counts the replicas that have
// acknowledged the last write of its own connection, so it must follow SET on
// the same one: on a new connection it waits for nothing and answers with the
// number of connected replicas at once.
func setReplicated(t *testing.T, addr, password, key, val string) {
	t.Helper()
	const waitTimeout = 5 * time.Second
	c, err := dial(addr, password, waitTimeout+commandTimeout)
	if err != nil {
		t.Fatalf("connecting to %s: %v", addr, err)
	}
	defer c.close()
	if v, err := c.do("SET", key, val); v != "OK" || err != nil {
		t.Fatalf("SET %s on %s = %v, %v; want OK", key, addr, v, err)
	}
	n, err := c.do("WAIT", "1", fmt.Sprint(waitTimeout.Milliseconds()))
	if n != int64(1) || err != nil {
		t.Fatalf("WAIT after SET on %s = %v, %v; want 1 replica", addr, n, err)
	}
}

func TestStandalone(t *testing.T) {
	s := StartStandalone(t)
	if got := do(t, s.Addr, "", "SET", "k", "v"); got != "OK" {
		t.Fatalf("SET = %v, want OK", got)
	}
	if got := do(t, s.Addr, "", "GET", "k"); got != "v" {
		t.Fatalf("GET = %v, want v", got)
	}
	if n := UsedMemory(t, s.Addr); n <= 0 {
		t.Fatalf("UsedMemory = %d, want > 0", n)
	}

	t.Run("stop and continue", func(t *testing.T) {
		s.Stop()
		if err := s.ping(200 * time.Millisecond); err == nil {
			t.Fatal("PING answered while stopped")
		}
		s.Continue()
		if err := s.ping(time.Second); err != nil {
			t.Fatalf("PING after Continue: %v", err)
		}
	})

	t.Run("kill and restart", func(t *testing.T) {
		addr, pid := s.Addr, s.Pid()
		s.Kill()
		if s.Pid() != 0 {
			t.Fatalf("Pid after Kill = %d, want 0", s.Pid())
		}
		if err := s.ping(200 * time.Millisecond); err == nil {
			t.Fatal("PING answered after Kill")
		}
		s.Restart()
		if s.Addr != addr {
			t.Fatalf("Addr after Restart = %s, want %s", s.Addr, addr)
		}
		if s.Pid() == 0 || s.Pid() == pid {
			t.Fatalf("Pid after Restart = %d, was %d", s.Pid(), pid)
		}
		if err := s.ping(time.Second); err != nil {
			t.Fatalf("PING after Restart: %v", err)
		}
	})

	t.Run("restart a stopped server", func(t *testing.T) {
		s.Stop()
		s.Restart()
		if err := s.ping(time.Second); err != nil {
			t.Fatalf("PING after Restart: %v", err)
		}
	})
}

func TestStandalonePassword(t *testing.T) {
	s := StartStandalone(t, WithPassword("secret"), WithArgs("--maxmemory", "10mb"))
	_, err := command(s.Addr, "", commandTimeout, "PING")
	if !strings.HasPrefix(fmt.Sprint(err), "NOAUTH") {
		t.Fatalf("PING without AUTH: err = %v, want NOAUTH", err)
	}
	v := do(t, s.Addr, "secret", "CONFIG", "GET", "maxmemory")
	if got := fmt.Sprint(v); got != "[maxmemory 10485760]" {
		t.Fatalf("CONFIG GET maxmemory = %s, want [maxmemory 10485760]", got)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t)
	if len(c.Masters) != 3 || len(c.Replicas) != 0 || len(c.Addrs()) != 3 {
		t.Fatalf("got %d masters, %d replicas, %d addrs; want 3, 0, 3", len(c.Masters), len(c.Replicas), len(c.Addrs()))
	}
	if got := c.MasterOfSlot(0); got != c.Masters[0] {
		t.Fatalf("MasterOfSlot(0) = %v, want Masters[0]", got)
	}
	if got := c.MasterOfSlot(16383); got != c.Masters[2] {
		t.Fatalf("MasterOfSlot(16383) = %v, want Masters[2]", got)
	}

	// Keys land on different masters; every SET goes to Masters[0] first and
	// follows the MOVED redirect, as a cluster client would.
	redirected := 0
	for i := range 10 {
		key, val := fmt.Sprintf("key-%d", i), fmt.Sprintf("val-%d", i)
		slot := do(t, c.Masters[0].Addr, "", "CLUSTER", "KEYSLOT", key).(int64)
		owner := c.MasterOfSlot(int(slot))
		if owner == nil {
			t.Fatalf("no master for slot %d", slot)
		}
		_, err := command(c.Masters[0].Addr, "", commandTimeout, "SET", key, val)
		var re replyError
		if errors.As(err, &re) {
			want := fmt.Sprintf("MOVED %d %s", slot, owner.Addr)
			if string(re) != want {
				t.Fatalf("SET %s via %s: %s, want %s", key, c.Masters[0].Addr, re, want)
			}
			redirected++
			do(t, owner.Addr, "", "SET", key, val)
		} else if err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		if got := do(t, owner.Addr, "", "GET", key); got != val {
			t.Fatalf("GET %s on %s = %v, want %s", key, owner.Addr, got, val)
		}
	}
	if redirected == 0 {
		t.Fatal("no key was redirected: keys all hashed to Masters[0]")
	}
}

func TestClusterFailover(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, WithReplicas(1))
	if len(c.Masters) != 3 || len(c.Replicas) != 3 {
		t.Fatalf("got %d masters, %d replicas; want 3 and 3", len(c.Masters), len(c.Replicas))
	}
	const key = "failover"
	slot := int(do(t, c.Masters[0].Addr, "", "CLUSTER", "KEYSLOT", key).(int64))
	old := c.MasterOfSlot(slot)
	i := indexOf(c.Masters, old)
	setReplicated(t, old.Addr, "", key, "kept")

	start := time.Now()
	old.Kill()
	var promoted *Server
	if err := polltest.Poll(settleTimeout, 50*time.Millisecond, nil, func() error {
		promoted = c.MasterOfSlot(slot)
		if promoted == old {
			return errors.New("killed master still serves the slot")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.WaitHealthy(t)
	t.Logf("failover of %s to %s took %s", old.Addr, promoted.Addr, time.Since(start).Round(time.Millisecond))
	if promoted != c.Replicas[i] {
		t.Fatalf("slot %d moved to %v, want the replica %s", slot, promoted, c.Replicas[i].Addr)
	}
	if got := do(t, promoted.Addr, "", "GET", key); got != "kept" {
		t.Fatalf("GET on the promoted replica = %v, want kept", got)
	}

	// The old master comes back with its nodes.conf and rejoins as a
	// replica; WaitHealthy returns once it is in sync with the promoted one.
	old.Restart()
	c.WaitHealthy(t)
	role := do(t, old.Addr, "", "ROLE").([]any)
	if role[0] != "slave" || fmt.Sprint(role[1], ":", role[2]) != promoted.Addr {
		t.Fatalf("ROLE of the restarted master = %v, want slave of %s", role, promoted.Addr)
	}
	// A replica answers reads only on a connection that sent READONLY.
	r, err := dial(old.Addr, "", commandTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if v, err := r.do("READONLY"); v != "OK" || err != nil {
		t.Fatalf("READONLY on %s = %v, %v", old.Addr, v, err)
	}
	if got, err := r.do("GET", key); got != "kept" || err != nil {
		t.Fatalf("GET on the restarted master = %v, %v; want kept", got, err)
	}
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t, WithPassword("secret"))
	if s.MasterName != "mymaster" || len(s.Addrs()) != 3 {
		t.Fatalf("MasterName %q, %d sentinels; want mymaster, 3", s.MasterName, len(s.Addrs()))
	}
	for _, addr := range s.Addrs() {
		got := fmt.Sprint(do(t, addr, "", "SENTINEL", "get-master-addr-by-name", "mymaster"))
		if want := "[" + strings.Replace(s.Master.Addr, ":", " ", 1) + "]"; got != want {
			t.Fatalf("sentinel %s: master %s, want %s", addr, got, want)
		}
	}
	role := do(t, s.Replica.Addr, "secret", "ROLE").([]any)
	if role[0] != "slave" {
		t.Fatalf("ROLE of the replica = %v, want slave", role)
	}

	// Killing the master makes the sentinels promote the replica, with what
	// it has acknowledged.
	setReplicated(t, s.Master.Addr, "secret", "failover", "kept")
	start := time.Now()
	s.Master.Kill()
	want := "[" + strings.Replace(s.Replica.Addr, ":", " ", 1) + "]"
	for _, addr := range s.Addrs() {
		if err := polltest.Poll(settleTimeout, 50*time.Millisecond, nil, func() error {
			v, err := command(addr, "", commandTimeout, "SENTINEL", "get-master-addr-by-name", "mymaster")
			if got := fmt.Sprint(v); err == nil && got != want {
				err = fmt.Errorf("master is %s, want %s", got, want)
			}
			return err
		}); err != nil {
			t.Fatalf("sentinel %s: %v", addr, err)
		}
	}
	t.Logf("sentinel failover to %s took %s", s.Replica.Addr, time.Since(start).Round(time.Millisecond))
	if role := do(t, s.Replica.Addr, "secret", "ROLE").([]any); role[0] != "master" {
		t.Fatalf("ROLE of the promoted replica = %v, want master", role)
	}
	if got := do(t, s.Replica.Addr, "secret", "GET", "failover"); got != "kept" {
		t.Fatalf("GET on the promoted replica = %v, want kept", got)
	}
}

// TestProxyFailover fails a master over by hand behind a Proxy: a
// connection made before the failover stays with the old master, now a
// replica that refuses writes; one made after it reaches the new master.
func TestProxyFailover(t *testing.T) {
	t.Parallel()
	a, b := StartStandalone(t), StartStandalone(t)
	b.ReplicaOf(a)
	p := StartProxy(t, a.Addr)
	before, err := dial(p.Addr, "", commandTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer before.close()
	if v, err := before.do("SET", "k", "a"); v != "OK" || err != nil {
		t.Fatalf("SET through the proxy = %v, %v; want OK", v, err)
	}

	b.Promote()
	a.ReplicaOf(b)
	p.Retarget(b.Addr)
	after, err := dial(p.Addr, "", commandTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer after.close()
	if _, err := before.do("SET", "k", "b"); err == nil || !strings.HasPrefix(err.Error(), "READONLY ") {
		t.Errorf("SET on the connection made before the failover: %v, want READONLY", err)
	}
	if v, err := after.do("SET", "k", "b"); v != "OK" || err != nil {
		t.Errorf("SET on the connection made after the failover = %v, %v; want OK", v, err)
	}
	if got := b.Do("GET", "k"); got != "b" {
		t.Errorf("GET on the new master = %v, want b", got)
	}
}

func TestKeySlot(t *testing.T) {
	// Values from CLUSTER KEYSLOT of redis-server 7.0.
	tests := []struct {
		key  string
		slot int
	}{
		{"", 0},
		{"123456789", 12739},
		{"somekey", 11058},
		{"foo{hash_tag}", 2515},
		{"{user1000}.following", 3443},
		{"user1000", 3443},
		{"foo{}{bar}", 8363},    // an empty tag hashes the whole key
		{"foo{{bar}}zap", 4015}, // the tag is "{bar"
		{"{bar", 4015},
		{"redistest:sync:{0}", 13907},
	}
	for _, tt := range tests {
		if got := keySlot(tt.key); got != tt.slot {
			t.Errorf("keySlot(%q) = %d, want %d", tt.key, got, tt.slot)
		}
	}
}

func TestKeyServedBy(t *testing.T) {
	const master = "127.0.0.1:7000"
	for _, own := range []slotRange{{0, 0, master}, {5461, 10922, master}, {16383, 16383, master}} {
		ranges := []slotRange{own, {own.end + 1, own.end + 1, "127.0.0.1:7001"}}
		key, err := keyServedBy(ranges, master)
		if err != nil {
			t.Fatalf("keyServedBy(%v): %v", own, err)
		}
		if slot := keySlot(key); slot < own.start || slot > own.end || !strings.HasPrefix(key, syncKeyPrefix) {
			t.Errorf("keyServedBy(%v) = %q in slot %d", own, key, slot)
		}
	}
	if _, err := keyServedBy([]slotRange{{0, 16383, "127.0.0.1:7001"}}, master); err == nil || err.Error() != "serves no slots" {
		t.Errorf("keyServedBy for a master without slots: err = %v, want serves no slots", err)
	}
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for name, start := range map[string]func(testing.TB){
		"StartStandalone": func(tb testing.TB) { StartStandalone(tb) },
		"StartCluster":    func(tb testing.TB) { StartCluster(tb) },
		"StartSentinel":   func(tb testing.TB) { StartSentinel(tb) },
	} {
		ft := &fatalTB{TB: t}
		ft.run(start)
		if !strings.Contains(ft.msg, "redis-server not found on PATH") || !strings.Contains(ft.msg, "make redis") {
			t.Errorf("%s: Fatalf(%q), want a message naming redis-server and `make redis`", name, ft.msg)
		}
	}
}

func TestWithReplicasRejected(t *testing.T) {
	for name, start := range map[string]func(testing.TB){
		"StartStandalone": func(tb testing.TB) { StartStandalone(tb, WithReplicas(1)) },
		"StartSentinel":   func(tb testing.TB) { StartSentinel(tb, WithReplicas(2)) },
		"StartCluster":    func(tb testing.TB) { StartCluster(tb, WithReplicas(-1)) },
	} {
		ft := &fatalTB{TB: t}
		ft.run(start)
		if !strings.Contains(ft.msg, "is not supported") {
			t.Errorf("%s: Fatalf(%q), want WithReplicas not supported", name, ft.msg)
		}
	}
}

// fatalTB records the first Fatalf instead of failing the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls start in its own goroutine, which Fatalf ends.
func (f *fatalTB) run(start func(testing.TB)) {
	var wg sync.WaitGroup
	wg.Go(func() { start(f) })
	wg.Wait()
}

func indexOf(list []*Server, s *Server) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}
