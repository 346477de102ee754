package admin

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/polltest"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestParseTokens(t *testing.T) {
	for _, tc := range []struct {
		name       string
		file       string
		reserveEnv bool
		want       []string // names
		wantErr    string
	}{
		{name: "empty", file: "", want: nil},
		{name: "comments and blanks", file: "# tokens\n\n   \n  # indented comment\n", want: nil},
		{name: "named and bare", file: "# ops\nalice s3cret-a-0123456789\n\n  s3cret-b-0123456789  \nbob\ts3cret-c-0123456789\n", want: []string{"alice", "line-4", "bob"}},
		{name: "three fields", file: "alice s3cret-a-0123456789 # a comment\n", wantErr: "line 1: want TOKEN or NAME TOKEN, got 5 fields"},
		{name: "duplicate name", file: "alice s3cret-a-0123456789\nalice s3cret-b-0123456789\n", wantErr: `line 2: the name "alice" is taken by line 1`},
		{name: "duplicate token", file: "alice s3cret-a-0123456789\nbob s3cret-a-0123456789\n", wantErr: "line 2: the same token as line 1"},
		{name: "env name reserved", file: "env s3cret-a-0123456789\n", reserveEnv: true, wantErr: `line 1: the name "env" is the environment's token's`},
		{name: "env name free without an env token", file: "env s3cret-a-0123456789\n", want: []string{"env"}},
		{name: "errors joined", file: "a b c\nx y-0123456789abcdef\nx z-0123456789abcdef\n", wantErr: "line 1: want TOKEN or NAME TOKEN, got 3 fields\nline 3: the name \"x\" is taken by line 2"},
		{name: "short token", file: "alice s3cret-a-0123456789\nbob s3cret-short\ns3cret\n",
			wantErr: "line 2: the token is shorter than 16 bytes\nline 3: the token is shorter than 16 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tokens, err := parseTokens([]byte(tc.file), tc.reserveEnv)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("the error shows a token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tok := range tokens {
				names = append(names, tok.name)
			}
			if !reflect.DeepEqual(names, tc.want) {
				t.Errorf("names %v, want %v", names, tc.want)
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, "alice token-alice-0123456789\ntoken-bare-0123456789\n")
	tokens, err := NewTokens(TokensOptions{File: path, Env: "token-env-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		presented string
		want      string
		ok        bool
	}{
		{"token-alice-0123456789", "alice", true},
		{"token-bare-0123456789", "line-2", true},
		{"token-env-0123456789", "env", true},
		{"", "", false},
		{"token-alic", "", false},
		{"token-alice-0123456789 ", "", false},
		{"alice", "", false},
		{"Token-alice", "", false},
	} {
		name, ok := tokens.Authenticate(tc.presented)
		if name != tc.want || ok != tc.ok {
			t.Errorf("Authenticate(%q) = %q, %v; want %q, %v", tc.presented, name, ok, tc.want, tc.ok)
		}
	}
	if got, want := tokens.Names(), []string{"alice", "line-2", "env"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
}

func TestNewTokens(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken")
	writeFile(t, broken, "a b c\n")
	for _, tc := range []struct {
		name        string
		opts        TokensOptions
		wantEnabled bool
		wantErr     string
	}{
		{name: "none", opts: TokensOptions{}, wantEnabled: false},
		{name: "env only", opts: TokensOptions{Env: "env-token-0123456789"}, wantEnabled: true},
		{name: "missing file", opts: TokensOptions{File: filepath.Join(dir, "absent")},
			wantErr: "invalid admin token file: open " + filepath.Join(dir, "absent") + ": no such file or directory"},
		{name: "bad line", opts: TokensOptions{File: broken},
			wantErr: "invalid admin token file " + broken + ": line 1: want TOKEN or NAME TOKEN, got 3 fields"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tokens, err := NewTokens(tc.opts)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrTokenFile) {
					t.Fatalf("error %v, want %q wrapping ErrTokenFile", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tokens.Enabled() != tc.wantEnabled {
				t.Errorf("Enabled() = %v, want %v", tokens.Enabled(), tc.wantEnabled)
			}
		})
	}
}

// TestShortEnvToken checks that a token shorter than MinTokenLen in the
// environment keeps tokens from loading, without showing it.
func TestShortEnvToken(t *testing.T) {
	_, err := NewTokens(TokensOptions{Env: "s3cret-short"})
	if want := "admin token of the environment (TOLLGATE_ADMIN_TOKEN): shorter than 16 bytes"; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}

// TestTokenFileRemoved deletes the token file of a running Tokens: its
// tokens stop working, the environment's does not, and a new file brings
// tokens back.
func TestTokenFileRemoved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, "ops token-ops-0123456789\n")
	var logs logtest.Buffer
	tokens, err := NewTokens(TokensOptions{File: path, Env: "token-env-0123456789", Debounce: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runTokens(t, tokens)
	accepts := func(tok string) func() bool {
		return func() bool { _, ok := tokens.Authenticate(tok); return ok }
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, 5*time.Second, func() bool { return !accepts("token-ops-0123456789")() }, "the removed file's token to be refused")
	if !accepts("token-env-0123456789")() {
		t.Error("the environment's token is refused after the file was removed")
	}
	if !strings.Contains(logs.String(), "admin token file removed: its tokens are refused") {
		t.Errorf("the removal is not logged:\n%s", logs.String())
	}
	writeFile(t, path, "ops token-ops-0123456789\n")
	polltest.Eventually(t, 5*time.Second, accepts("token-ops-0123456789"), "the file's token to work again once it is back")
}

// TestTokenWatchConcerns holds the watch to the events that may change the
// token file: another file of its directory, such as a log written all the
// time, must not make it read the file again.
func TestTokenWatchConcerns(t *testing.T) {
	tokens := &Tokens{file: "/etc/tollgate/admin/tokens"}
	for path, want := range map[string]bool{
		"/etc/tollgate/admin/tokens":       true,
		"/etc/tollgate/admin/..data":       true, // a Kubernetes secret's swap
		"/etc/tollgate/admin/audit.jsonl":  false,
		"/etc/tollgate/admin/tokens.swp":   false,
		"/etc/tollgate/admin/..2026_11_28": false,
	} {
		if got := tokens.concerns(path); got != want {
			t.Errorf("concerns(%q) = %v, want %v", path, got, want)
		}
	}
}

// runTokens starts tokens.Run and stops it when the test ends.
func runTokens(t *testing.T, tokens *Tokens) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := tokens.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestTokenFileReload rotates tokens by editing the file in place and by
// renaming a new file over it, as editors do; a broken edit keeps the
// tokens read before and logs why without showing a token.
func TestTokenFileReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	writeFile(t, path, "old token-old-0123456789\n")
	var logs logtest.Buffer
	tokens, err := NewTokens(TokensOptions{File: path, Debounce: time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runTokens(t, tokens)
	accepts := func(tok string) func() bool {
		return func() bool { _, ok := tokens.Authenticate(tok); return ok }
	}

	// Rotation: both tokens for a while, then the new one alone.
	writeFile(t, path, "old token-old-0123456789\nnew token-new-0123456789\n")
	polltest.Eventually(t, 5*time.Second, accepts("token-new-0123456789"), "the added token to be accepted")
	tmp := filepath.Join(dir, ".tokens.swp")
	writeFile(t, tmp, "new token-new-0123456789\n")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, 5*time.Second, func() bool { return !accepts("token-old-0123456789")() }, "the removed token to be refused")
	if !accepts("token-new-0123456789")() {
		t.Fatal("the kept token is refused")
	}

	// A broken edit: the tokens stay, the log says why.
	writeFile(t, path, "new token-new-0123456789 extra-field\n")
	polltest.Eventually(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), "admin token file rejected") },
		"the broken file to be logged")
	if !accepts("token-new-0123456789")() {
		t.Fatal("a broken edit dropped the tokens")
	}
	if !strings.Contains(logs.String(), "line 1: want TOKEN or NAME TOKEN, got 3 fields") {
		t.Errorf("the log does not say what is wrong:\n%s", logs.String())
	}
	for _, secret := range []string{"token-old-0123456789", "token-new-0123456789", "extra-field"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log shows %q:\n%s", secret, logs.String())
		}
	}

	// Emptied, the file accepts no token: the API stays on and refuses all.
	writeFile(t, path, "# revoked\n")
	polltest.Eventually(t, 5*time.Second, func() bool { return !accepts("token-new-0123456789")() }, "the emptied file to revoke the token")
	if !tokens.Enabled() {
		t.Error("an emptied token file disabled the admin API")
	}
}

// TestTokenFileKubernetesSecret swaps the "..data" symlink of a mounted
// secret, which changes the file without writing it.
func TestTokenFileKubernetesSecret(t *testing.T) {
	dir := t.TempDir()
	mkVersion := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "tokens"), content)
	}
	mkVersion("..v1", "ops token-v1-0123456789\n")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "tokens"), filepath.Join(dir, "tokens")); err != nil {
		t.Fatal(err)
	}
	tokens, err := NewTokens(TokensOptions{File: filepath.Join(dir, "tokens"), Debounce: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runTokens(t, tokens)
	mkVersion("..v2", "ops token-v2-0123456789\n")
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, 5*time.Second, func() bool { _, ok := tokens.Authenticate("token-v2-0123456789"); return ok },
		"the swapped secret's token to be accepted")
	if _, ok := tokens.Authenticate("token-v1-0123456789"); ok {
		t.Error("the old secret's token is still accepted")
	}
}
