package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tollgatehq/tollgate/pkg/admin"
)

// The ANSI sequences the live view draws with.
const (
	enterScreen = "\x1b[?1049h\x1b[?25l" // the alternate screen, cursor hidden
	leaveScreen = "\x1b[?25h\x1b[?1049l" // the cursor shown, the normal screen back
	home        = "\x1b[H"
	clearLine   = "\x1b[K" // to the end of the line
	clearBelow  = "\x1b[J" // from the cursor to the end of the screen
	bold, plain = "\x1b[1m", "\x1b[m"
)

// topClients is how many clients the live view shows under each rule.
const topClients = 3

func newTopCommand(c cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "top [--addr HOST:PORT] [--domain D] [--by rejected|requests] [--window 1m|5m|1h] [--interval 1s]",
		Short: "Show the rules' rates and top limited clients live, like top",
		Long: `Show a live view of a running tollgate's admin API, redrawn every --interval:
per rule its decisions and rejections per second over the last minute, the
hottest client's share of the limit, and under it the top clients by
rejections (or requests) over --window, merged over the fleet.

Keys: q or Ctrl-C quits, r ranks the clients by rejected, d by requests
(decisions). It needs a terminal; for a one-shot answer that a script can
read, use tollgate admin top (--json).`,
		Args: noArgs,
	}
	fs := flags(cmd)
	var af adminFlags
	af.register(fs)
	var tf topFlags
	tf.register(fs)
	interval := fs.Duration("interval", time.Second, "time between refreshes")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		out, ok := c.stdout.(*os.File)
		if !ok || !isTerminal(out) {
			return usageError("standard output is not a terminal: top draws a live view; for a one-shot answer use tollgate admin top (--json for scripts)")
		}
		if err := tf.check(); err != nil {
			return err
		}
		if *interval < 100*time.Millisecond {
			return usageError("--interval: want at least 100ms, got %s", *interval)
		}
		cl, err := af.client(c.getenv)
		if err != nil {
			return err
		}
		v := &topView{client: cl, addr: af.addr, timeout: af.timeout, flags: tf}
		// The first refresh fails before the screen is taken: a wrong
		// address or token is an error on the shell, not a screen.
		if err := v.refresh(cmd.Context()); err != nil {
			return err
		}
		return v.run(cmd.Context(), out, *interval)
	}
	return cmd
}

// topView is the state of the live view: where it reads from, what it
// asks, and what it read last.
type topView struct {
	client  *admin.Client
	addr    string
	timeout time.Duration
	flags   topFlags

	rules   rulesAnswer
	top     map[ruleID][]topLine // the top clients of each rule
	window  string               // of the top clients, as the server said
	at      time.Time            // of the last successful refresh
	lastErr error                // of the last refresh, nil if it succeeded
}

// topLine is one client under a rule.
type topLine struct {
	descriptor                   string
	requests, rejected, errBound uint64
}

// refresh reads the rules and each domain's top clients.
func (v *topView) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	raw, err := v.client.Rules(ctx, admin.RulesQuery{Domain: v.flags.domain})
	if err != nil {
		return err
	}
	var rules rulesAnswer
	if err := json.Unmarshal(raw, &rules); err != nil {
		return fmt.Errorf("reading the answer of GET /v1/rules: %w", err)
	}
	top := make(map[ruleID][]topLine)
	window := v.flags.window
	for _, d := range rules.domains() {
		// One call per domain, as many entries as the API gives, grouped
		// by rule here: a rule whose clients all rank below the
		// domain's first thousand shows none.
		raw, err := v.client.Top(ctx, admin.TopQuery{Domain: d, By: v.flags.by, Window: v.flags.window, Limit: admin.MaxTopLimit})
		if err != nil {
			return err
		}
		var ans topAnswer
		if err := json.Unmarshal(raw, &ans); err != nil {
			return fmt.Errorf("reading the answer of GET /v1/top for domain %s: %w", d, err)
		}
		window = ans.Window
		for _, e := range ans.Entries {
			if len(top[e.ruleID]) < topClients {
				top[e.ruleID] = append(top[e.ruleID], topLine{showEntries(e.Descriptor), e.Requests, e.Rejected, e.Error})
			}
		}
	}
	v.rules, v.top, v.window, v.at = rules, top, window, time.Now()
	return nil
}

// run takes the terminal out is on, draws the view every interval until
// q, Ctrl-C or ctx ends it, and gives the terminal back as it was.
func (v *topView) run(ctx context.Context, out *os.File, interval time.Duration) (err error) {
	in, closeIn, err := keyboard()
	if err != nil {
		return err
	}
	defer closeIn()
	var state *term.State
	if err := control(in, func(fd int) (err error) { state, err = term.MakeRaw(fd); return err }); err != nil {
		return fmt.Errorf("putting the terminal in raw mode: %w", err)
	}
	defer func() {
		_, werr := out.WriteString(leaveScreen)
		rerr := control(in, func(fd int) error { return term.Restore(fd, state) })
		if rerr != nil {
			rerr = fmt.Errorf("restoring the terminal: %w", rerr)
		}
		err = errors.Join(err, werr, rerr)
	}()
	if _, err := out.WriteString(enterScreen); err != nil {
		return err
	}

	// The keys q and Ctrl-C end ctx, so that they also cut short a
	// refresh that waits on a slow server.
	ctx, quit := context.WithCancel(ctx)
	keys := make(chan byte)
	stopKeys := readKeys(ctx, quit, in, keys)
	defer stopKeys()

	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if err := v.draw(out); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case k := <-keys:
			switch k {
			case 'r', 'd':
				v.flags.by = map[byte]string{'r': "rejected", 'd': "requests"}[k]
			default:
				continue
			}
		case <-ticker.C:
		}
		v.lastErr = v.refresh(ctx)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// keyboard returns the terminal to read keys from: standard input if it
// is a terminal whose reads can be given a deadline, else the process's
// controlling terminal, /dev/tty, opened anew (which on Linux can be).
func keyboard() (in *os.File, closeIn func(), err error) {
	if isTerminal(os.Stdin) && os.Stdin.SetReadDeadline(time.Time{}) == nil {
		return os.Stdin, func() {}, nil
	}
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the terminal to read keys from: %w", err)
	}
	return tty, func() { tty.Close() }, nil
}

// readKeys sends the bytes read from in to keys until ctx ends; q, Q
// and Ctrl-C (which raw mode delivers as a byte, 3) call quit instead. It
// returns a function that calls quit, stops the reading and waits for it.
// Where in's reads take no deadline (a terminal on macOS), a read under
// way cannot be interrupted: the reader then ends with the process.
func readKeys(ctx context.Context, quit context.CancelFunc, in *os.File, keys chan<- byte) (stop func()) {
	stoppable := in.SetReadDeadline(time.Time{}) == nil
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 64)
		for {
			n, err := in.Read(buf)
			for _, b := range buf[:n] {
				if b == 'q' || b == 'Q' || b == 3 {
					quit()
					return
				}
				select {
				case keys <- b:
				case <-ctx.Done():
					return
				}
			}
			if err != nil || ctx.Err() != nil {
				return
			}
		}
	})
	return func() {
		quit()
		// A deadline in the past ends the read under way.
		if stoppable && in.SetReadDeadline(time.Now()) == nil {
			wg.Wait()
		}
	}
}

// draw writes one frame of the view to out, fitted to its size.
func (v *topView) draw(out *os.File) error {
	var width, height int
	if err := control(out, func(fd int) (err error) { width, height, err = term.GetSize(fd); return err }); err != nil {
		return fmt.Errorf("reading the terminal's size: %w", err)
	}
	lines := v.frame()
	if len(lines) > height {
		lines = lines[:height]
	}
	var b bytes.Buffer
	b.WriteString(home)
	for i, l := range lines {
		if i > 0 {
			b.WriteString("\r\n")
		}
		bolded := strings.HasPrefix(l, bold)
		l = strings.TrimPrefix(l, bold)
		if bolded {
			b.WriteString(bold)
		}
		b.WriteString(fit(l, width))
		if bolded {
			b.WriteString(plain)
		}
		b.WriteString(clearLine)
	}
	b.WriteString(clearBelow)
	_, err := out.Write(b.Bytes())
	return err
}

// frame returns the lines of the view; a line that starts with bold is
// drawn in bold.
func (v *topView) frame() []string {
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	add("%stollgate top  %s  %s  %s  clients by %s over %s", bold, showValue(v.addr), instances(v.rules.Instances),
		v.at.Format(time.TimeOnly), v.flags.by, v.window)
	switch {
	case v.lastErr != nil:
		add("refresh failed, showing %s: %s", v.at.Format(time.TimeOnly), oneLine(v.lastErr.Error()))
	case v.rules.Partial:
		add("partial: some instances did not answer")
	default:
		add("q quit  r by rejected  d by requests")
	}
	add("")
	add("%s%-40s %-12s %12s %11s %8s", bold, "DOMAIN RULE / CLIENT", "LIMIT", "DECISIONS/S", "REJECTED/S", "HOTTEST")
	if len(v.rules.Rules) == 0 {
		add("no rule decided anything in the last hour")
	}
	rules := slices.Clone(v.rules.Rules)
	slices.SortStableFunc(rules, func(a, b ruleRates) int {
		if v.flags.by == "requests" {
			return cmp.Or(cmp.Compare(b.Decisions1m, a.Decisions1m), cmp.Compare(b.Rejected1m, a.Rejected1m))
		}
		return cmp.Or(cmp.Compare(b.Rejected1m, a.Rejected1m), cmp.Compare(b.Decisions1m, a.Decisions1m))
	})
	for _, r := range rules {
		limit := "-"
		if r.RequestsPerUnit > 0 {
			limit = fmt.Sprintf("%d/%s", r.RequestsPerUnit, r.Unit)
		}
		add("%-40s %-12s %12.2f %11.2f %8.2f", showValue(r.Domain)+" "+showValue(r.String()), limit, r.Decisions1m, r.Rejected1m, r.HottestRatio)
		for _, c := range v.top[r.ruleID] {
			add("  %-38s requests %d  rejected %d  ±%d", c.descriptor, c.requests, c.rejected, c.errBound)
		}
	}
	return lines
}

// fit cuts s to width runes.
func fit(s string, width int) string {
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:max(width, 0)])
}

// oneLine returns s with every character that is not printable, line
// breaks included, replaced by a space.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, s)
}

// control runs fn with f's file descriptor. It goes through SyscallConn
// rather than Fd, which would put f in blocking mode for good and so end
// the read deadlines that stop the key reader.
func control(f *os.File, fn func(fd int) error) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var fnErr error
	if err := sc.Control(func(fd uintptr) { fnErr = fn(int(fd)) }); err != nil {
		return err
	}
	return fnErr
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	is := false
	err := control(f, func(fd int) error { is = term.IsTerminal(fd); return nil })
	return err == nil && is
}
