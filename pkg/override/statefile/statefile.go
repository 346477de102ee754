// Package statefile keeps the overrides of a tollgate that counts in
// memory (--store memory) in process, and in a state file so that they
// survive a restart.
//
// # Guarantees
//
// Every change rewrites the whole file atomically: the new contents go to
// a temporary file in the same directory, which is synced and renamed over
// the old one, and the directory is synced; a crash leaves the old file or
// the new one, never a mix. A change is refused (and the overrides in
// memory stay as they were) when the file cannot be written. Expired
// overrides are dropped at the next write.
//
// A state file that cannot be decoded is not fatal: Open logs an error
// naming it, renames it aside (overrides.json.corrupt-<unix nanoseconds>,
// kept for inspection), and starts with no overrides.
package statefile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tollgatehq/tollgate/pkg/override"
)

// FileName is the state file's name in the state directory.
const FileName = "overrides.json"

// version is the format of the state file.
const version = 1

// state is the state file's contents.
type state struct {
	Version   int                 `json:"version"`
	Overrides []override.Override `json:"overrides"`
}

// Options configures Open. The zero value works.
type Options struct {
	// Now is the clock that judges expiry; nil means time.Now.
	Now func() time.Time
	// Logger gets the error about a corrupt file; nil discards.
	Logger *slog.Logger
}

// Store is an override.Backend in process memory, persisted in a state
// file. It is safe for concurrent use.
type Store struct {
	path string
	now  func() time.Time

	mu   sync.Mutex
	list []override.Override
}

var _ override.Backend = (*Store)(nil)

// Open reads the state file in dir, creating dir if need be; a missing
// file means no overrides. With dir "" nothing is persisted: the
// overrides live only as long as the process. A file that cannot be decoded is renamed aside
// and logged, and the Store starts empty; Open fails only when the
// directory or the file cannot be read or the corrupt file moved.
func Open(dir string, opts Options) (*Store, error) {
	s := &Store{now: opts.Now}
	if s.now == nil {
		s.now = time.Now
	}
	if dir == "" {
		return s, nil
	}
	s.path = filepath.Join(dir, FileName)
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("override state directory: %w", err)
	}
	data, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("reading override state: %w", err)
	}
	st, err := decode(data)
	if err != nil {
		aside := s.path + ".corrupt-" + strconv.FormatInt(time.Now().UnixNano(), 10)
		if rerr := os.Rename(s.path, aside); rerr != nil {
			return nil, fmt.Errorf("override state file %s is corrupt (%w) and cannot be moved aside: %w", s.path, err, rerr)
		}
		log.Error("override state file is corrupt; moved aside, starting with no overrides",
			"component", "overrides", "file", s.path, "moved_to", aside, "error", err)
		return s, nil
	}
	s.list = st.Overrides
	return s, nil
}

// decode parses a state file.
func decode(data []byte) (state, error) {
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return state{}, err
	}
	if st.Version != version {
		return state{}, fmt.Errorf("unknown version %d (want %d)", st.Version, version)
	}
	for i, o := range st.Overrides {
		if o.ID == "" || o.Domain == "" || len(o.Entries) == 0 || (o.Limit == nil) == (o.Multiplier == 0) {
			return state{}, fmt.Errorf("overrides[%d]: incomplete override", i)
		}
	}
	return st, nil
}

// Path returns the state file's path, "" when nothing is persisted.
func (s *Store) Path() string { return s.path }

// Load returns the overrides held.
func (s *Store) Load(context.Context) ([]override.Override, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.list), nil
}

// Put adds o and writes the file; when the file cannot be written, o is
// not added.
func (s *Store) Put(_ context.Context, o override.Override) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := append(s.live(), o)
	if err := s.write(next); err != nil {
		return err
	}
	s.list = next
	return nil
}

// Delete removes the override with the id and writes the file.
func (s *Store) Delete(_ context.Context, id string) (override.Override, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.list, func(o override.Override) bool { return o.ID == id })
	if i < 0 {
		return override.Override{}, override.ErrNotFound
	}
	o := s.list[i]
	next := slices.DeleteFunc(s.live(), func(o override.Override) bool { return o.ID == id })
	if err := s.write(next); err != nil {
		return override.Override{}, err
	}
	s.list = next
	return o, nil
}

// live returns a copy of the overrides that have not expired; s.mu is
// held.
func (s *Store) live() []override.Override {
	now := s.now()
	out := make([]override.Override, 0, len(s.list)+1)
	for _, o := range s.list {
		if now.Before(o.ExpiresAt) {
			out = append(out, o)
		}
	}
	return out
}

// write replaces the state file with list, atomically.
func (s *Store) write(list []override.Override) error {
	if s.path == "" {
		return nil
	}
	data, err := json.MarshalIndent(state{Version: version, Overrides: list}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding override state: %w", err)
	}
	dir := filepath.Dir(s.path)
	f, err := os.CreateTemp(dir, FileName+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing override state: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing override state %s: %w", s.path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
