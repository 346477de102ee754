package redistest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/polltest"
)

// errExited reports that a redis-server process ended while it was awaited.
var errExited = errors.New("redis-server exited")

// errAddrInUse reports that a redis-server could not bind its port (or its
// cluster bus port), so a start may be retried on other ports.
var errAddrInUse = errors.New("address already in use")

// startAttempts bounds the retries of a start on fresh ports.
const startAttempts = 5

// Server is one redis-server process, a data node or a sentinel, listening on
// 127.0.0.1. Its methods report failures to the TB it was started with.
type Server struct {
	// Addr is "127.0.0.1:port"; it stays the same across Restart.
	Addr string

	t        testing.TB
	bin      string
	args     []string
	dir      string
	logPath  string
	password string
	// cluster is set for a cluster node.
	cluster bool

	// logShown is set once a failure message carried the log tail, so
	// cleanup does not print it again.
	logShown bool

	mu      sync.Mutex
	proc    *process // nil while not running
	stopped bool
}

// process is one run of the server: Restart starts a new one.
type process struct {
	cmd       *exec.Cmd
	logOffset int64         // size of the log when the run began
	done      chan struct{} // closed once the process has been reaped
}

// StartStandalone starts one standalone redis-server and waits until it
// answers PING.
func StartStandalone(t testing.TB, opts ...Option) *Server {
	t.Helper()
	o := buildOptions(t, "StartStandalone", func(n int) bool { return n == 0 }, opts)
	bin := lookPath(t, "redis-server")
	start := time.Now()
	s := startDataNode(t, bin, o, false, nil)
	t.Logf("redistest: standalone %s ready in %s", s.Addr, time.Since(start).Round(time.Millisecond))
	return s
}

// startDataNode starts a redis-server that holds data: standalone, a
// cluster node (when cluster is set) or a sentinel-monitored master or
// replica. extra goes before the caller's WithArgs.
func startDataNode(t testing.TB, bin string, o options, cluster bool, extra []string) *Server {
	t.Helper()
	return startServer(t, bin, o.password, cluster, func(dir string, port int) ([]string, error) {
		args := []string{
			"--bind", "127.0.0.1",
			"--port", strconv.Itoa(port),
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
			"--protected-mode", "no",
			"--daemonize", "no",
			// A replica syncs at once instead of after the default 5 s
			// wait for more replicas.
			"--repl-diskless-sync-delay", "0",
		}
		if o.password != "" {
			args = append(args, "--requirepass", o.password, "--masterauth", o.password)
		}
		if cluster {
			args = append(args,
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", "1000",
			)
		}
		args = append(args, extra...)
		return append(args, o.args...), nil
	})
}

// startServer starts a redis-server in a new temporary directory with the
// arguments build returns for a free port, retrying on other ports when the
// chosen one was taken meanwhile, and waits until it answers PING. password
// is what the harness authenticates with; cluster says the server is a
// cluster node, whose bus port must be free as well.
func startServer(t testing.TB, bin, password string, cluster bool, build func(dir string, port int) ([]string, error)) *Server {
	t.Helper()
	dir := t.TempDir()
	s := &Server{t: t, bin: bin, dir: dir, logPath: filepath.Join(dir, "redis.log"), password: password, cluster: cluster}
	// Registered after TempDir, so it runs before the directory is removed.
	t.Cleanup(func() {
		if t.Failed() && !s.logShown {
			t.Logf("redistest: log tail of %s (%s):\n%s", s.Addr, s.logPath, s.logTail(0))
		}
		if err := s.kill(); err != nil {
			t.Errorf("redistest: stopping %s: %v", s.Addr, err)
		}
	})
	var err error
	for range startAttempts {
		var port int
		port, err = freePort(cluster)
		if err != nil {
			break
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.args, err = build(dir, port)
		if err != nil {
			break
		}
		var p *process
		p, err = s.launch()
		if err != nil {
			break
		}
		if err = s.waitReady(p); !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if err != nil {
		s.logShown = true
		t.Fatalf("redistest: starting redis-server %s: %v\nlog tail (%s):\n%s", s.Addr, err, s.logPath, s.logTail(0))
	}
	return s
}

// freePort returns a port that was free on 127.0.0.1 a moment ago; with bus
// set, port+10000 was free as well.
func freePort(bus bool) (int, error) {
	var err error
	for range 50 {
		var l net.Listener
		l, err = net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			continue
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !bus {
			l.Close()
			return port, nil
		}
		if port+clusterBusOffset > 65535 {
			l.Close()
			continue
		}
		var b net.Listener
		b, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+clusterBusOffset)))
		l.Close()
		if err != nil {
			continue
		}
		b.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port on 127.0.0.1: %w", err)
}

// launch starts the process in the foreground with its output appended to
// the log, and reaps it in a goroutine that closes done.
func (s *Server) launch() (*process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return nil, fmt.Errorf("%s is already running", s.Addr)
	}
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	offset, err := log.Seek(0, io.SeekEnd)
	if err != nil {
		log.Close()
		return nil, err
	}
	fmt.Fprintf(log, "=== redistest: %s %s\n", s.bin, strings.Join(s.args, " "))
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	p := &process{cmd: cmd, logOffset: offset, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // an exit status is expected: we kill it
		log.Close()
		close(p.done)
	}()
	s.proc = p
	s.stopped = false
	return p, nil
}

// waitReady polls PING until the process answers, exits or readyTimeout
// passes. An exit because the port was taken is errAddrInUse; the process is
// reaped and forgotten on any failure.
func (s *Server) waitReady(p *process) error {
	err := polltest.Poll(readyTimeout, 10*time.Millisecond, p.done, func() error {
		return s.ping(time.Second)
	})
	if err == nil {
		return nil
	}
	if errors.Is(err, polltest.ErrAborted) {
		s.mu.Lock()
		if s.proc == p {
			s.proc = nil
		}
		s.mu.Unlock()
		if strings.Contains(s.logTail(p.logOffset), "Address already in use") {
			return errAddrInUse
		}
		return fmt.Errorf("%w: %v", errExited, p.cmd.ProcessState)
	}
	if kerr := s.kill(); kerr != nil {
		return errors.Join(err, kerr)
	}
	return err
}

// ping sends PING (after AUTH when the server has a password) and expects
// PONG within timeout.
func (s *Server) ping(timeout time.Duration) error {
	v, err := command(s.Addr, s.password, timeout, "PING")
	if err != nil {
		return err
	}
	if v != "PONG" {
		return fmt.Errorf("PING answered %v", v)
	}
	return nil
}

// Pid returns the process id of the running server, or 0 when it is not
// running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Kill sends SIGKILL and waits until the process is reaped. It does nothing
// when the server is not running.
func (s *Server) Kill() {
	s.t.Helper()
	if err := s.kill(); err != nil {
		s.t.Fatalf("redistest: killing %s: %v", s.Addr, err)
	}
}

func (s *Server) kill() error {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.stopped = false
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	// SIGKILL ends a stopped process too.
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(readyTimeout):
		return fmt.Errorf("pid %d not reaped %s after SIGKILL", p.cmd.Process.Pid, readyTimeout)
	}
}

// Restart starts the server again on the same port with the same data
// directory and arguments, killing it first if it is still running, and waits
// until it answers PING. A cluster node keeps its nodes.conf and so its
// identity; a sentinel keeps the configuration it rewrote.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.kill(); err != nil {
		s.t.Fatalf("redistest: restarting %s: %v", s.Addr, err)
	}
	start := time.Now()
	p, err := s.launch()
	if err == nil {
		err = s.waitReady(p)
	}
	if err != nil {
		s.logShown = true
		s.t.Fatalf("redistest: restarting %s: %v\nlog tail (%s):\n%s", s.Addr, err, s.logPath, s.logTail(0))
	}
	s.t.Logf("redistest: %s restarted in %s", s.Addr, time.Since(start).Round(time.Millisecond))
}

// Stop sends SIGSTOP: the server hangs, its port still accepts connections
// but nothing is answered, until Continue.
func (s *Server) Stop() {
	s.t.Helper()
	s.signal(syscall.SIGSTOP, true)
}

// Continue sends SIGCONT to a server paused with Stop.
func (s *Server) Continue() {
	s.t.Helper()
	s.signal(syscall.SIGCONT, false)
}

func (s *Server) signal(sig syscall.Signal, stopped bool) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		s.t.Fatalf("redistest: %v to %s: not running", sig, s.Addr)
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: %v to %s: %v", sig, s.Addr, err)
	}
	s.stopped = stopped
}

// live reports whether the server runs and is not stopped.
func (s *Server) live() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.stopped
}

// logTail returns the last lines the server logged since offset.
func (s *Server) logTail(offset int64) string {
	const limit = 4 << 10
	f, err := os.Open(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	start := max(offset, fi.Size()-limit)
	b := make([]byte, fi.Size()-start)
	n, _ := f.ReadAt(b, start)
	return string(b[:n])
}

// Do sends one command to the server, authenticated as the harness is, and
// returns its reply: a string, an int64, nil, or a []any of those. An error
// reply, or no reply, fails the test.
func (s *Server) Do(args ...string) any {
	s.t.Helper()
	v, err := command(s.Addr, s.password, commandTimeout, args...)
	if err != nil {
		s.t.Fatalf("redistest: %s on %s: %v", strings.Join(args, " "), s.Addr, err)
	}
	return v
}
