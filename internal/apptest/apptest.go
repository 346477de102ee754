// Package apptest starts real tollgate Apps for tests: the one way a test
// starts one. An App serves on loopback ports chosen by the kernel and
// stops when the test ends; a Run that fails, or that does not return
// within StopTimeout of the stop, fails the test.
package apptest

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/app"
)

// StopTimeout bounds how long a stopped App may take to return from Run.
const StopTimeout = 10 * time.Second

// Options change the App that Start runs; the zero value serves the rules
// of the directory on the memory store and discards the logs.
type Options struct {
	// Settings, if not nil, changes the settings after Start's own; the
	// result must be valid.
	Settings func(*app.Settings)
	// Logger gets the App's logs; nil discards them.
	Logger *slog.Logger
	// Reload, if not nil, is the App's reload channel.
	Reload <-chan struct{}
}

// Running is an App that Start runs, and where it listens.
type Running struct {
	*app.App
	// AdminAddr is "" while the admin API is off.
	GRPCAddr, HTTPAddr, AdminAddr, DebugAddr string
	// AuditFile is the audit log's file.
	AuditFile string

	stop func() error
}

// Stop stops the App and returns what Run returned. It may be called more
// than once, and is called when the test ends.
func (r *Running) Stop() error { return r.stop() }

// Start runs a tollgate serving the rules in dir until the test ends. Its
// settings are app.DefaultSettings with every listener on 127.0.0.1:0 and
// the audit log in a file of the test's (not its stderr), then whatever
// opts.Settings changes.
func Start(t testing.TB, dir string, opts Options) *Running {
	t.Helper()
	s, err := app.DefaultSettings()
	if err != nil {
		t.Fatal(err)
	}
	s.ConfigDir, s.Listen.GRPC, s.Listen.HTTP, s.Listen.Admin, s.Listen.Debug = dir, "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	s.Admin.AuditLog = filepath.Join(t.TempDir(), "audit.jsonl")
	if opts.Settings != nil {
		opts.Settings(&s)
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, s, logger, opts.Reload)
	if err != nil {
		cancel()
		t.Fatalf("starting tollgate: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	r := &Running{App: a, AuditFile: s.Admin.AuditLog}
	addrs := a.Addrs()
	r.GRPCAddr, r.HTTPAddr, r.AdminAddr, r.DebugAddr = addrs.GRPC, addrs.HTTP, addrs.Admin, addrs.Debug
	r.stop = sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(StopTimeout):
			return fmt.Errorf("the App did not return from Run within %v of the stop", StopTimeout)
		}
	})
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}
