package redistest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/polltest"
)

// Cluster is a Redis Cluster of three masters, each with the same number of
// replicas, created with redis-cli --cluster create. Nodes run with
// cluster-node-timeout 1000, so a killed master is replaced within seconds.
type Cluster struct {
	// Masters are the masters as created, in slot order: Masters[0] serves
	// slot 0 and Masters[2] slot 16383. Roles change after a failover; ask
	// MasterOfSlot for the current one.
	Masters []*Server
	// Replicas are the replicas as created, grouped in the order of Masters:
	// with n replicas per master, Replicas[i*n+j] replicates Masters[i].
	Replicas []*Server

	t        testing.TB
	password string
	nodes    []*Server // every node, in start order
}

// StartCluster starts 3 masters (and WithReplicas(n) replicas of each),
// creates the cluster with redis-cli and waits until the cluster is healthy
// as WaitHealthy defines it: every node reports cluster_state:ok, all agree
// on the slot map and every replica is in sync with its master.
func StartCluster(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	o := buildOptions(t, "StartCluster", func(n int) bool { return n >= 0 }, opts)
	bin := lookPath(t, "redis-server")
	cli := lookPath(t, "redis-cli")
	start := time.Now()

	c := &Cluster{t: t, password: o.password}
	args := []string{"--cluster", "create"}
	for range clusterMasters * (1 + o.replicas) {
		s := startDataNode(t, bin, o, true, nil)
		c.nodes = append(c.nodes, s)
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(o.replicas), "--cluster-yes")

	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.Env = os.Environ()
	if o.password != "" {
		// Not -a, which makes redis-cli print a warning.
		cmd.Env = append(cmd.Env, "REDISCLI_AUTH="+o.password)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redistest: %s %s: %v\n%s", cli, strings.Join(args, " "), err, out)
	}

	c.WaitHealthy(t)
	if err := c.assignRoles(o.replicas); err != nil {
		t.Fatalf("redistest: reading cluster roles: %v", err)
	}
	t.Logf("redistest: cluster of %d masters and %d replicas ready in %s",
		len(c.Masters), len(c.Replicas), time.Since(start).Round(time.Millisecond))
	return c
}

// assignRoles fills Masters in slot order and Replicas grouped by master,
// from the slot map and the ROLE of every node.
func (c *Cluster) assignRoles(replicas int) error {
	ranges, err := clusterSlots(c.nodes[0].Addr, c.password)
	if err != nil {
		return err
	}
	byAddr := c.byAddr()
	for _, r := range ranges {
		m := byAddr[r.master]
		if m == nil {
			return fmt.Errorf("slots %d-%d served by unknown node %s", r.start, r.end, r.master)
		}
		if !slices.Contains(c.Masters, m) {
			c.Masters = append(c.Masters, m)
		}
	}
	masterOf := make(map[*Server]string)
	for _, s := range c.nodes {
		if slices.Contains(c.Masters, s) {
			continue
		}
		v, err := command(s.Addr, c.password, commandTimeout, "ROLE")
		if err != nil {
			return fmt.Errorf("ROLE on %s: %w", s.Addr, err)
		}
		role, _ := v.([]any)
		if len(role) < 3 || role[0] != "slave" {
			return fmt.Errorf("%s serves no slots but has ROLE %v", s.Addr, v)
		}
		host, _ := role[1].(string)
		port, _ := role[2].(int64)
		masterOf[s] = net.JoinHostPort(host, strconv.FormatInt(port, 10))
	}
	for _, m := range c.Masters {
		var group []*Server
		for _, s := range c.nodes {
			if masterOf[s] == m.Addr {
				group = append(group, s)
			}
		}
		if len(group) != replicas {
			return fmt.Errorf("master %s has %d replicas, want %d", m.Addr, len(group), replicas)
		}
		c.Replicas = append(c.Replicas, group...)
	}
	if len(c.Masters) != clusterMasters {
		return fmt.Errorf("%d masters serve slots, want %d", len(c.Masters), clusterMasters)
	}
	return nil
}

// Addrs returns the addresses of the masters as created, to seed a client.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		addrs[i] = m.Addr
	}
	return addrs
}

// MasterOfSlot returns the node that serves slot according to the first live
// node that answers CLUSTER SLOTS, or nil when no node serves it. Right after
// a failover nodes may still disagree; WaitHealthy waits until they agree.
func (c *Cluster) MasterOfSlot(slot int) *Server {
	c.t.Helper()
	var errs []error
	for _, s := range c.nodes {
		if !s.live() {
			continue
		}
		ranges, err := clusterSlots(s.Addr, c.password)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Addr, err))
			continue
		}
		for _, r := range ranges {
			if r.start <= slot && slot <= r.end {
				m := c.byAddr()[r.master]
				if m == nil {
					c.t.Fatalf("redistest: %s says slot %d is served by unknown node %s", s.Addr, slot, r.master)
				}
				return m
			}
		}
		return nil
	}
	c.t.Fatalf("redistest: no live cluster node answered CLUSTER SLOTS: %v", errors.Join(errs...))
	return nil
}

// WaitHealthy polls until every live (running, not stopped) node reports
// cluster_state:ok with all 16384 slots assigned and ok, every live node
// sees the others connected and not failing, all live nodes agree on a slot
// map whose masters are live, and every live replica is in sync with its
// master: a write the harness makes on the master has reached the replica
// (a replica that reports its link up may not receive writes yet). It fails t
// after 20 s.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(settleTimeout)
	if err := polltest.Poll(settleTimeout, 50*time.Millisecond, nil, c.healthy); err != nil {
		t.Fatalf("redistest: cluster not healthy: %v", err)
	}
	for _, s := range c.nodes {
		if !s.live() {
			continue
		}
		if err := waitSynced(s, time.Until(deadline)); err != nil {
			t.Fatalf("redistest: cluster not healthy: replica %s not in sync: %v", s.Addr, err)
		}
	}
	t.Logf("redistest: cluster healthy after %s", time.Since(start).Round(time.Millisecond))
}

func (c *Cluster) healthy() error {
	var live []*Server
	for _, s := range c.nodes {
		if s.live() {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return errors.New("no live node")
	}
	liveAddr := make(map[string]bool, len(live))
	for _, s := range live {
		liveAddr[s.Addr] = true
	}
	var want, wantFrom string
	for _, s := range live {
		info, err := commandString(s.Addr, c.password, "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", s.Addr, err)
		}
		for field, value := range map[string]string{
			"cluster_state":          "ok",
			"cluster_slots_assigned": strconv.Itoa(slotCount),
			"cluster_slots_ok":       strconv.Itoa(slotCount),
		} {
			if got, _ := infoField(info, field); got != value {
				return fmt.Errorf("%s reports %s:%s", s.Addr, field, got)
			}
		}

		nodes, err := commandString(s.Addr, c.password, "CLUSTER", "NODES")
		if err != nil {
			return fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr, err)
		}
		seen := make(map[string]bool)
		for line := range strings.SplitSeq(strings.TrimSpace(nodes), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 {
				return fmt.Errorf("%s: bad CLUSTER NODES line %q", s.Addr, line)
			}
			addr, _, _ := strings.Cut(f[1], "@")
			if !liveAddr[addr] {
				continue
			}
			if strings.Contains(f[2], "fail") || strings.Contains(f[2], "handshake") || strings.Contains(f[2], "noaddr") || f[7] != "connected" {
				return fmt.Errorf("%s sees %s as %s, %s", s.Addr, addr, f[2], f[7])
			}
			seen[addr] = true
		}
		if len(seen) != len(live) {
			return fmt.Errorf("%s knows %d of %d live nodes", s.Addr, len(seen), len(live))
		}

		ranges, err := clusterSlots(s.Addr, c.password)
		if err != nil {
			return err
		}
		var sig strings.Builder
		for _, r := range ranges {
			if !liveAddr[r.master] {
				return fmt.Errorf("%s says slots %d-%d are served by %s, which is down", s.Addr, r.start, r.end, r.master)
			}
			fmt.Fprintf(&sig, "%d-%d@%s ", r.start, r.end, r.master)
		}
		if want == "" {
			want, wantFrom = sig.String(), s.Addr
		} else if sig.String() != want {
			return fmt.Errorf("slot maps differ: %s has %s, %s has %s", wantFrom, want, s.Addr, sig.String())
		}
	}
	return nil
}

func (c *Cluster) byAddr() map[string]*Server {
	m := make(map[string]*Server, len(c.nodes))
	for _, s := range c.nodes {
		m[s.Addr] = s
	}
	return m
}

// slotRange is one entry of CLUSTER SLOTS.
type slotRange struct {
	start, end int
	master     string
}

// clusterSlots returns the slot map as the node at addr sees it, ordered by
// first slot.
func clusterSlots(addr, password string) ([]slotRange, error) {
	v, err := command(addr, password, commandTimeout, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS on %s: %w", addr, err)
	}
	entries, _ := v.([]any)
	ranges := make([]slotRange, 0, len(entries))
	for _, e := range entries {
		f, _ := e.([]any)
		if len(f) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS on %s: bad entry %v", addr, e)
		}
		start, _ := f[0].(int64)
		end, _ := f[1].(int64)
		node, _ := f[2].([]any)
		if len(node) < 2 {
			return nil, fmt.Errorf("CLUSTER SLOTS on %s: bad node %v", addr, f[2])
		}
		host, _ := node[0].(string)
		port, _ := node[1].(int64)
		ranges = append(ranges, slotRange{int(start), int(end), net.JoinHostPort(host, strconv.FormatInt(port, 10))})
	}
	slices.SortFunc(ranges, func(a, b slotRange) int { return cmp.Compare(a.start, b.start) })
	return ranges, nil
}
