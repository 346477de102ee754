// Package logtest holds what tests need to read the logs of code that logs
// from goroutines of its own.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that a logger and a test can share: every
// method holds a lock. The zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
