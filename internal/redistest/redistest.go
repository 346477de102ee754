// Package redistest starts real redis-server processes for tests: a
// standalone server, a Redis Cluster of three masters (optionally with
// replicas) and a Sentinel setup of one master, one replica and three
// sentinels. Servers can be made replicas and promoted by hand, and a
// Proxy stands for an address that a failover moves to the new master (a
// Kubernetes Service, a DNS name).
//
// Every server binds 127.0.0.1 on a free port, keeps its data directory and
// log in a t.TempDir, and is killed and reaped in t.Cleanup, whether the test
// passed or not. A failing test gets the tail of each server's log. Waiting is
// always a poll with a deadline, never a fixed sleep.
//
// The functions and methods report failures through the testing.TB they were
// given (methods without one use the TB of the Start call), so call them from
// the goroutine of that test.
//
// redis-server and redis-cli must be on PATH; `make redis` installs them and
// `make test` runs it first.
package redistest

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// readyTimeout bounds the wait for a started process to answer PING.
	readyTimeout = 10 * time.Second
	// settleTimeout bounds the waits for a cluster or a sentinel setup to
	// agree on its topology, a failover included.
	settleTimeout = 20 * time.Second
	// commandTimeout bounds one command of the harness itself.
	commandTimeout = 2 * time.Second
	// clusterBusOffset is the distance from a cluster node's port to the
	// port of its cluster bus, as Redis computes it.
	clusterBusOffset = 10000
	// slotCount is the number of hash slots of a Redis Cluster.
	slotCount = 16384
	// clusterMasters is the number of masters StartCluster creates.
	clusterMasters = 3
	// sentinelCount is the number of sentinels StartSentinel runs.
	sentinelCount = 3
	// sentinelQuorum is the quorum of the monitored master.
	sentinelQuorum = 2
	// masterName is the name the sentinels monitor the master under.
	masterName = "mymaster"
)

// Option changes how a Start function sets servers up.
type Option func(*options)

type options struct {
	replicas    int
	replicasSet bool
	password    string
	args        []string
}

// WithReplicas sets the number of replicas per master. StartCluster runs none
// by default; StartSentinel always runs one and accepts only 1 here;
// StartStandalone accepts only 0.
func WithReplicas(n int) Option {
	return func(o *options) {
		o.replicas = n
		o.replicasSet = true
	}
}

// WithPassword protects every data node with requirepass, lets replicas
// authenticate with masterauth, and gives the sentinels the password through
// auth-pass. Sentinels themselves take no password.
func WithPassword(pw string) Option {
	return func(o *options) { o.password = pw }
}

// WithArgs appends arguments to the command line of every data node (not of
// sentinels), after the harness's own, so they can override them; for example
// WithArgs("--maxmemory", "10mb").
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// buildOptions applies opts and fails t when WithReplicas asks for something
// fn cannot run.
func buildOptions(t testing.TB, fn string, allowed func(n int) bool, opts []Option) options {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.replicasSet && !allowed(o.replicas) {
		t.Fatalf("redistest: %s: WithReplicas(%d) is not supported", fn, o.replicas)
	}
	return o
}

// lookPath finds a Redis binary or fails t with how to install it.
func lookPath(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("redistest: %s not found on PATH (%v): run `make redis` to install it (make test installs it)", name, err)
	}
	return path
}

// infoField returns the value of field in the text of an INFO reply.
func infoField(info, field string) (string, bool) {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), field+":"); ok {
			return v, true
		}
	}
	return "", false
}

// UsedMemory returns used_memory from INFO memory of the server at addr. It
// sends no AUTH, so it suits servers started without WithPassword.
func UsedMemory(t testing.TB, addr string) int64 {
	t.Helper()
	reply, err := command(addr, "", commandTimeout, "INFO", "memory")
	if err != nil {
		t.Fatalf("redistest: INFO memory on %s: %v", addr, err)
	}
	info, _ := reply.(string)
	v, ok := infoField(info, "used_memory")
	if !ok {
		t.Fatalf("redistest: INFO memory on %s has no used_memory:\n%s", addr, info)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("redistest: used_memory on %s: %v", addr, err)
	}
	return n
}
