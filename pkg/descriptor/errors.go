package descriptor

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Error is one problem found in a configuration file. Load and LoadFS
// return every Error they find, joined with errors.Join; use errors.As to
// reach them.
type Error struct {
	// File is the file's path: relative to the FS for LoadFS, joined with
	// the directory for Load.
	File string
	// Line is the 1-based line of the offending YAML node, or 0 where no
	// line applies (such as an unreadable file).
	Line int
	// Path names the descriptor in the tree, such as
	// "api_key/endpoint=/search", or is empty for domain-level problems.
	Path string
	// Msg says what is wrong.
	Msg string
}

// Error formats e as "file:line: path: msg", leaving out the line when it
// is 0 and the path when it is empty.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// errorList collects the errors of a load.
type errorList []*Error

func (l *errorList) add(file string, line int, path, format string, args ...any) {
	*l = append(*l, &Error{File: file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// join sorts the errors by file and line, keeping the order in which they
// were found for equal positions, and joins them.
func (l errorList) join() error {
	if len(l) == 0 {
		return nil
	}
	slices.SortStableFunc(l, func(a, b *Error) int {
		return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errors.Join(errs...)
}
