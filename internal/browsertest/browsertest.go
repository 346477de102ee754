// Package browsertest starts a real headless Chromium for tests, the one
// way a test drives a page: Debian's chromium, driven from Go through the
// DevTools protocol (chromedp), with a fresh profile and the flags a
// machine without a network needs. `make deps` installs it, and `make
// test` does so first.
//
// A Browser records every request its pages send and every answer they
// get, with the exceptions and the console's errors, so that a test can
// check what crossed the network as well as what the page shows. Every
// step runs within StepTimeout and the whole browser within Lifetime, so a
// page that never shows what a test waits for fails the test instead of
// hanging it. Screenshots go to the test's artifact directory
// (testing.T.ArtifactDir): kept under -outputdir with `go test
// -artifacts`, as `make test` runs, and removed after the test otherwise.
package browsertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

const (
	// Executable is the browser Start runs: Debian's chromium package.
	Executable = "chromium"
	// StepTimeout bounds one step of Do or Run.
	StepTimeout = 10 * time.Second
	// Lifetime bounds the whole browser, from Start to the test's end.
	Lifetime = 2 * time.Minute
)

// Request is a request a page sent.
type Request struct {
	Method, URL string
	// Authorization is the request's Authorization header, if it had one.
	Authorization string
}

// Response is an answer a page got.
type Response struct {
	URL    string
	Status int64
}

// Browser is one tab of a headless Chromium that a test drives.
type Browser struct {
	t   testing.TB
	ctx context.Context
	// shots numbers the screenshots, in the order they are taken.
	shots int

	mu        sync.Mutex
	requests  []Request
	responses []Response
	problems  []string
}

// Start starts a headless Chromium with an empty profile and opens a tab,
// until the test ends. It fails the test when chromium is not installed.
func Start(t testing.TB) *Browser {
	t.Helper()
	path, err := exec.LookPath(Executable)
	if err != nil {
		t.Fatalf("browsertest: %s not found on PATH (%v): run `make deps` to install it (make test does)", Executable, err)
	}
	life, cancelLife := context.WithTimeout(context.Background(), Lifetime)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(life,
		chromedp.ExecPath(path),
		// The flags Chromium needs on a machine with no network and no
		// display, running as root: without the background-networking
		// ones it tries Google's hosts at every start.
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // and waits for the browser to exit
		cancelLife()
	})
	b := &Browser{t: t, ctx: ctx}
	// Listen starts the browser and opens the tab, within Lifetime (a
	// shorter deadline here would end the browser with it).
	if err := chromedp.Listen(ctx, b.record); err != nil {
		t.Fatalf("browsertest: starting %s: %v", path, err)
	}
	return b
}

// record keeps what the tab's events say of requests, answers and
// problems. It runs in the tab's event loop, so it only appends.
func (b *Browser) record(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		r := Request{Method: ev.Request.Method, URL: ev.Request.URL}
		for name, value := range ev.Request.Headers {
			if s, ok := value.(string); ok && strings.EqualFold(name, "Authorization") {
				r.Authorization = s
			}
		}
		b.requests = append(b.requests, r)
	case *network.EventResponseReceived:
		b.responses = append(b.responses, Response{URL: ev.Response.URL, Status: ev.Response.Status})
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			text = d.Exception.Description
		}
		b.problems = append(b.problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, text))
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			b.problems = append(b.problems, "console."+string(ev.Type)+": "+strings.Join(args, " "))
		}
	case *log.EventEntryAdded:
		// Failed loads (a 404 the page expects) are in Responses; the rest
		// of the browser's errors, such as a Content-Security-Policy
		// violation, are problems.
		if ev.Entry.Level == log.EntryLevelError && ev.Entry.Source != log.EntrySourceNetwork {
			b.problems = append(b.problems, fmt.Sprintf("%s: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
		}
	}
}

// Requests returns the requests the tab's pages sent so far, in order.
func (b *Browser) Requests() []Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Request(nil), b.requests...)
}

// Responses returns the answers the tab's pages got so far, in order.
func (b *Browser) Responses() []Response {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Response(nil), b.responses...)
}

// Problems returns the uncaught exceptions, console errors and the
// browser's own errors (a refused script, a Content-Security-Policy
// violation) so far.
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// Do runs the actions in the tab within StepTimeout, or fails the test
// with what they were doing, keeping a screenshot of the page.
func (b *Browser) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	Run(b, what, chromedp.Steps(actions...))
}

// Run runs action in b's tab within StepTimeout and returns its value, or
// fails the test with what it was doing, keeping a screenshot of the
// page.
func Run[T any](b *Browser, what string, action chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, StepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, action)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("not done within %v: %w", StepTimeout, err)
		}
		b.Screenshot("failed")
		b.t.Fatalf("browser: %s: %v\nproblems in the page: %q", what, err, b.Problems())
	}
	return v
}

// Screenshot saves a PNG of the whole page as NN-name.png in the test's
// artifact directory, logs its path and returns it.
func (b *Browser) Screenshot(name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, StepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("browser: screenshot %s: %v", name, err)
		return ""
	}
	b.shots++
	path := filepath.Join(b.t.ArtifactDir(), fmt.Sprintf("%02d-%s.png", b.shots, name))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Errorf("browser: screenshot %s: %v", name, err)
		return ""
	}
	b.t.Logf("screenshot: %s", path)
	return path
}
