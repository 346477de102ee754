package app

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"
)

// runningApp is where a test's tollgate listens.
type runningApp struct {
	grpcAddr, httpAddr, debugAddr string
}

// serveTest starts a tollgate serving the configuration in dir on the
// memory store; tweak, if not nil, changes its settings first.
func serveTest(t *testing.T, dir string, tweak func(*Settings)) runningApp {
	t.Helper()
	a := startApp(t, dir, slog.New(slog.DiscardHandler), tweak)
	var r runningApp
	r.grpcAddr, r.httpAddr, r.debugAddr = a.Addrs()
	return r
}

// startApp runs a tollgate serving the configuration in dir on loopback
// ports, logging to logger, until the test ends; tweak, if not nil,
// changes its settings first.
func startApp(t *testing.T, dir string, logger *slog.Logger, tweak func(*Settings)) *App {
	t.Helper()
	s, err := DefaultSettings()
	if err != nil {
		t.Fatal(err)
	}
	s.ConfigDir, s.GRPCAddr, s.HTTPAddr, s.DebugAddr = dir, "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	s.AuditLog = filepath.Join(t.TempDir(), "audit.jsonl") // not the test's stderr
	if tweak != nil {
		tweak(&s)
		if err := s.validate(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, s, logger)
	if err != nil {
		cancel()
		t.Fatalf("starting tollgate: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10 s of the stop")
		}
	})
	return a
}
