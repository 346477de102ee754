package admin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// EnvTokenName is the name of the token given in the environment
// (TOLLGATE_ADMIN_TOKEN), as logs and the audit show it.
const EnvTokenName = "env"

// DefaultTokenDebounce is how long after a change in the token file's
// directory the file is read again, when TokensOptions.Debounce is zero.
const DefaultTokenDebounce = 100 * time.Millisecond

// ErrTokenFile reports a token file that cannot be used; the error that
// wraps it names the file and, for a bad line, its number, never its
// content.
var ErrTokenFile = errors.New("invalid admin token file")

// MinTokenLen is the shortest admin token accepted, in bytes: a shorter
// one, in the file or the environment, is refused at load, so that no
// guessable token opens the admin API.
const MinTokenLen = 16

// TokensOptions configure Tokens. With neither File nor Env the admin API
// is disabled.
type TokensOptions struct {
	// File holds one token per line: "NAME TOKEN", or "TOKEN" alone, which
	// is named "line-N" after its line number; a token has at least
	// MinTokenLen bytes. Blank lines and lines
	// beginning with "#" are ignored. Names and tokens must each be
	// unique. Run reads it again whenever it changes.
	File string
	// Env is one more token, named EnvTokenName, of at least MinTokenLen
	// bytes.
	Env string
	// Debounce is how long after the first change of a burst the file is
	// read again; zero means DefaultTokenDebounce.
	Debounce time.Duration
	// Logger receives the reloads of the file and their failures, which
	// name tokens and lines but never show a token. Nil discards.
	Logger *slog.Logger
}

// Tokens holds the admin tokens and checks the ones callers present. It
// keeps only SHA-256 sums of the tokens and compares sums in constant
// time, trying every token, so that neither a token's content nor its
// length nor which one matched shows in the time an answer takes. It is
// safe for concurrent use.
type Tokens struct {
	file     string
	env      *token
	debounce time.Duration
	log      *slog.Logger

	// set holds the tokens of the file as last read successfully, the env
	// token included.
	set atomic.Pointer[tokenSet]
}

type token struct {
	name string
	sum  [sha256.Size]byte
}

type tokenSet struct {
	tokens []token
	// content is the file as read, so that a reread of an unchanged file
	// changes nothing and logs nothing.
	content [sha256.Size]byte
	// gone is set when the file was not there: it has no tokens.
	gone bool
}

// NewTokens reads the token file, if any. It fails when the file cannot be
// read or has a bad line, so that the service never starts with admin
// tokens other than those configured.
func NewTokens(opts TokensOptions) (*Tokens, error) {
	t := &Tokens{file: opts.File, debounce: opts.Debounce, log: opts.Logger}
	if t.debounce <= 0 {
		t.debounce = DefaultTokenDebounce
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	t.log = t.log.With("component", "admin-tokens")
	if opts.Env != "" {
		if len(opts.Env) < MinTokenLen {
			return nil, fmt.Errorf("admin token of the environment (TOLLGATE_ADMIN_TOKEN): shorter than %d bytes", MinTokenLen)
		}
		t.env = &token{name: EnvTokenName, sum: sha256.Sum256([]byte(opts.Env))}
	}
	set := &tokenSet{}
	if t.file != "" {
		var err error
		if set, err = t.read(); err != nil {
			return nil, err
		}
	}
	if t.env != nil {
		set.tokens = append(set.tokens, *t.env)
	}
	t.set.Store(set)
	return t, nil
}

// Enabled reports whether any token was configured, in a file (even one
// that lists none at the moment) or in the environment.
func (t *Tokens) Enabled() bool {
	return t != nil && (t.file != "" || t.env != nil)
}

// Names returns the names of the tokens accepted now, in the file's order
// and then EnvTokenName.
func (t *Tokens) Names() []string {
	set := t.set.Load()
	names := make([]string, len(set.tokens))
	for i, tok := range set.tokens {
		names[i] = tok.name
	}
	return names
}

// Authenticate returns the name of the token presented, and whether it is
// one of the tokens accepted now.
func (t *Tokens) Authenticate(presented string) (name string, ok bool) {
	sum := sha256.Sum256([]byte(presented))
	match := -1
	set := t.set.Load()
	for i := range set.tokens {
		// Every token is compared, whichever matches.
		eq := subtle.ConstantTimeCompare(sum[:], set.tokens[i].sum[:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 || presented == "" {
		return "", false
	}
	return set.tokens[match].name, true
}

// read reads and parses the token file.
func (t *Tokens) read() (*tokenSet, error) {
	data, err := os.ReadFile(t.file)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTokenFile, err)
	}
	tokens, err := parseTokens(data, t.env != nil)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrTokenFile, t.file, err)
	}
	return &tokenSet{tokens: tokens, content: sha256.Sum256(data)}, nil
}

// parseTokens parses a token file. reserveEnv reserves the name
// EnvTokenName for the environment's token. Its errors name lines by
// number and never quote a token.
func parseTokens(data []byte, reserveEnv bool) ([]token, error) {
	var (
		tokens []token
		errs   []error
		names  = map[string]int{} // line of each name
		sums   = map[[sha256.Size]byte]int{}
	)
	if reserveEnv {
		names[EnvTokenName] = 0
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var name, secret string
		switch fields := strings.Fields(line); len(fields) {
		case 1:
			name, secret = "line-"+strconv.Itoa(n), fields[0]
		case 2:
			name, secret = fields[0], fields[1]
		default:
			errs = append(errs, fmt.Errorf("line %d: want TOKEN or NAME TOKEN, got %d fields", n, len(fields)))
			continue
		}
		if len(secret) < MinTokenLen {
			errs = append(errs, fmt.Errorf("line %d: the token is shorter than %d bytes", n, MinTokenLen))
			continue
		}
		tok := token{name: name, sum: sha256.Sum256([]byte(secret))}
		if at, dup := names[tok.name]; dup {
			if at == 0 {
				errs = append(errs, fmt.Errorf("line %d: the name %q is the environment's token's", n, tok.name))
			} else {
				errs = append(errs, fmt.Errorf("line %d: the name %q is taken by line %d", n, tok.name, at))
			}
			continue
		}
		if at, dup := sums[tok.sum]; dup {
			errs = append(errs, fmt.Errorf("line %d: the same token as line %d", n, at))
			continue
		}
		names[tok.name], sums[tok.sum] = n, n
		tokens = append(tokens, tok)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	return tokens, errors.Join(errs...)
}

// Run reads the token file again whenever it changes, until ctx ends; it
// then returns nil once its watch has stopped. It watches the file's
// directory, not the file, so that an editor's rename and a Kubernetes
// secret's "..data" swap are seen, and reacts to events of the file and of
// "..data" alone, so that other files of the directory (a log, say) cannot
// make it read the file again and again. A file that has a bad line or
// cannot be read is logged and the tokens read before stay; a file that is
// gone leaves no token of its own (the environment's stays). Run returns
// an error if the watch cannot be set up, and nil at once without a file.
func (t *Tokens) Run(ctx context.Context) error {
	if t.file == "" {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("admin tokens: starting watcher: %w", err)
	}
	defer w.Close()
	dir := filepath.Dir(t.file)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("admin tokens: watching %s: %w", dir, err)
	}
	// A change made between NewTokens and the watch is read now.
	t.reload()

	// A change is read once the debounce period after the first event
	// of a burst has passed: later events of the burst do not postpone
	// it, so a busy directory cannot keep a revocation waiting.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	pending := false
	schedule := func() {
		if !pending {
			pending = true
			timer.Reset(t.debounce)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("admin tokens: watcher closed unexpectedly")
			}
			if ev.Op != fsnotify.Chmod && t.concerns(ev.Name) {
				schedule()
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("admin tokens: watcher closed unexpectedly")
			}
			t.log.Warn("watcher error; reading the token file again", slog.Any("error", err))
			schedule()
		case <-timer.C:
			pending = false
			t.reload()
		}
	}
}

// concerns reports whether an event on path may change the token file:
// an event of the file itself, or of the "..data" link a Kubernetes
// secret or ConfigMap swaps.
func (t *Tokens) concerns(path string) bool {
	return filepath.Clean(path) == filepath.Clean(t.file) || filepath.Base(path) == "..data"
}

// reload reads the file again and swaps in its tokens when they changed.
// A file that is gone takes its tokens with it.
func (t *Tokens) reload() {
	set, err := t.read()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if t.set.Load().gone {
			return
		}
		set = &tokenSet{gone: true}
		t.log.Warn("admin token file removed: its tokens are refused", slog.String("file", t.file))
	case err != nil:
		t.log.Warn("admin token file rejected; the previous tokens stay", slog.String("file", t.file), slog.Any("error", err))
		return
	}
	if cur := t.set.Load(); set.content == cur.content && set.gone == cur.gone {
		return
	}
	if t.env != nil {
		set.tokens = append(set.tokens, *t.env)
	}
	t.set.Store(set)
	if !set.gone {
		t.log.Info("admin tokens reloaded", slog.String("file", t.file), slog.Any("names", t.Names()))
	}
}
