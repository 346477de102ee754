package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tollgatehq/tollgate/internal/latencyproxy"
)

// serveProxy is the load test run with -serve-proxy: a latency proxy in
// front of target (see internal/latencyproxy) that prints its address on
// stdout and serves until its stdin closes, as it does when the load test
// that started it exits.
func serveProxy(target string, latency time.Duration) error {
	p, err := latencyproxy.New(target, latency)
	if err != nil {
		return err
	}
	defer p.Close()
	fmt.Println(p.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// startProxy starts this program again as a latency proxy in front of
// target, pinned to core 0 beside Redis (its CPU is the network's, not
// tollgate's), logging to logName in dir, and returns it and its address.
func startProxy(dir, logName, target string, latency time.Duration) (*exec.Cmd, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	log, err := os.Create(filepath.Join(dir, logName))
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command("taskset", "-c", "0", self, "-serve-proxy", target, "-proxy-latency", latency.String())
	cmd.Stderr = log
	if _, err := cmd.StdinPipe(); err != nil { // closed when the load test exits
		return nil, "", err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting the latency proxy: %w", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop(cmd)
		return nil, "", fmt.Errorf("reading the latency proxy's address: %w; its log:\n%s", err, tail(filepath.Join(dir, logName)))
	}
	return cmd, strings.TrimSpace(line), nil
}
