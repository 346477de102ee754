package audit

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// File is an audit log file that entries are appended to. It opens the
// file again at its path when the file was moved or removed (a log
// rotation) before a write, and when Reopen is called (on SIGHUP), and it
// counts the writes that failed, which a slog handler would drop silently.
// It is safe for concurrent use.
type File struct {
	path     string
	mu       sync.Mutex
	f        *os.File
	failures atomic.Int64
}

// OpenFile opens path for appending, creating it with mode 0600.
func OpenFile(path string) (*File, error) {
	f := &File{path: path}
	if err := f.open(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *File) open() error {
	file, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("opening the audit log: %w", err)
	}
	if f.f != nil {
		_ = f.f.Close()
	}
	f.f = file
	return nil
}

// Write appends p, opening the file again first when its path no longer
// names the file open. A failed write is counted and returned.
func (f *File) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.moved() {
		if err := f.open(); err != nil {
			f.failures.Add(1)
			return 0, err
		}
	}
	n, err := f.f.Write(p)
	if err != nil {
		f.failures.Add(1)
	}
	return n, err
}

// moved reports whether the path no longer names the open file.
func (f *File) moved() bool {
	open, err := f.f.Stat()
	if err != nil {
		return true
	}
	cur, err := os.Stat(f.path)
	return err != nil || !os.SameFile(open, cur)
}

// Reopen opens the file again at its path.
func (f *File) Reopen() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open()
}

// Failures returns how many writes have failed.
func (f *File) Failures() int64 { return f.failures.Load() }

// Close closes the file.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.f.Close()
}
