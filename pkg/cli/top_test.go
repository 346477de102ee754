package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/term"

	"github.com/tollgatehq/tollgate/internal/apptest"
)

// TestTopRefusesWithoutTerminal checks that tollgate top, whose standard
// output is not a terminal, says so and points to admin top.
func TestTopRefusesWithoutTerminal(t *testing.T) {
	code, out, errOut := runMain("top")
	want := "tollgate top: usage: standard output is not a terminal: top draws a live view; for a one-shot answer use tollgate admin top (--json for scripts)\n"
	if code != 2 || out != "" || errOut != want {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, want)
	}
}

// screen reads what a program writes to the pseudo-terminal whose master
// is ptmx.
type screen struct {
	t    *testing.T
	ctx  context.Context // bounds every read
	ptmx *os.File
	out  bytes.Buffer
}

// send types keys on the terminal.
func (s *screen) send(keys string) {
	s.t.Helper()
	if _, err := s.ptmx.WriteString(keys); err != nil {
		s.t.Fatal(err)
	}
}

// waitFor reads until the output holds want, or fails the test when
// s.ctx ends first.
func (s *screen) waitFor(want string) {
	s.t.Helper()
	deadline, _ := s.ctx.Deadline()
	if err := s.ptmx.SetReadDeadline(deadline); err != nil {
		s.t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for !bytes.Contains(s.out.Bytes(), []byte(want)) {
		n, err := s.ptmx.Read(buf)
		s.out.Write(buf[:n])
		if err != nil {
			s.t.Fatalf("reading the terminal for %q: %v; the screen so far:\n%q", want, err, s.out.String())
		}
	}
}

// withDeadlines returns f, a pseudo-terminal's master that package pty
// put in blocking mode, as a file whose reads take deadlines, and closes
// f.
func withDeadlines(t *testing.T, f *os.File) *os.File {
	t.Helper()
	defer f.Close()
	fd, err := syscall.Dup(int(f.Fd()))
	if err == nil {
		err = syscall.SetNonblock(fd, true)
	}
	if err != nil {
		t.Fatal(err)
	}
	// A descriptor in non-blocking mode makes a file that takes
	// deadlines.
	return os.NewFile(uintptr(fd), f.Name())
}

// TestTopTerminal runs the tollgate binary's live view on a real
// pseudo-terminal, as its controlling terminal, against a running
// tollgate where one client went past its limit among light ones: the
// screen shows that client under its rule and is redrawn, d ranks the
// clients by requests, and q (or Ctrl-C) quits with exit code 0, leaving the normal
// screen and the terminal's modes as they were.
func TestTopTerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "tollgate")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/tollgatehq/tollgate/cmd/tollgate").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	a := apptest.StartAdmin(t)
	driveTraffic(t, a)
	t.Run("q", func(t *testing.T) {
		runTop(t, bin, a, func(s *screen) {
			s.out.Reset()
			s.send("d")
			s.waitFor("clients by requests over 5m")
			s.waitFor("api_key=light")
			s.send("q")
		})
	})
	t.Run("Ctrl-C", func(t *testing.T) {
		runTop(t, bin, a, func(s *screen) {
			// The next frame, drawn when the interval has passed.
			s.out.Reset()
			s.waitFor("api_key=heavy")
			s.send("\x03")
		})
	})
}

// runTop runs `bin top` against a on a new pseudo-terminal of 30 rows
// and 120 columns, waits for the screen to show the limited client,
// leaves the rest to drive, and checks that the program then exits 0
// with the terminal as it found it.
func runTop(t *testing.T, bin string, a *apptest.Admin, drive func(*screen)) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 30, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	ptmx = withDeadlines(t, ptmx)
	defer ptmx.Close()
	before, err := term.GetState(int(tty.Fd()))
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "top", "--addr", a.AdminAddr, "--interval", "200ms")
	cmd.Env = []string{"TOLLGATE_ADMIN_TOKEN=" + apptest.OpsToken, "TERM=xterm"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &screen{t: t, ctx: ctx, ptmx: ptmx}
	s.waitFor("\x1b[?1049h")
	s.waitFor("api_key=heavy")
	if strings.Contains(s.out.String(), "api_key=light") {
		t.Errorf("a light client is shown among the limited ones:\n%q", s.out.String())
	}
	drive(s)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tollgate top: %v; the screen:\n%q", err, s.out.String())
	}
	// Everything the program wrote is in the terminal before what we
	// write to it now, which marks its end.
	const end = "\x00end of output"
	if _, err := tty.WriteString(end); err != nil {
		t.Fatal(err)
	}
	s.waitFor(end)
	if out := strings.TrimSuffix(s.out.String(), end); !strings.HasSuffix(out, "\x1b[?25h\x1b[?1049l") {
		t.Errorf("the output does not end by showing the cursor and leaving the alternate screen: ...%q", out[max(len(out)-80, 0):])
	}
	after, err := term.GetState(int(tty.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Errorf("the terminal's modes after tollgate top: %+v, want them as before: %+v", after, before)
	}
}
