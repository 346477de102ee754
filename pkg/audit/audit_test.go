package audit_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/pkg/audit"
)

var t0 = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

func TestLast(t *testing.T) {
	for _, tc := range []struct {
		name     string
		size     int
		recorded int
		n        int
		want     []string // targets, oldest first
	}{
		{name: "empty", size: 3, recorded: 0, n: 10, want: []string{}},
		{name: "fewer than kept", size: 3, recorded: 2, n: 0, want: []string{"t0", "t1"}},
		{name: "last one", size: 3, recorded: 2, n: 1, want: []string{"t1"}},
		{name: "exactly full", size: 3, recorded: 3, n: 0, want: []string{"t0", "t1", "t2"}},
		{name: "wrapped keeps the newest", size: 3, recorded: 5, n: 0, want: []string{"t2", "t3", "t4"}},
		{name: "wrapped, last two", size: 3, recorded: 5, n: 2, want: []string{"t3", "t4"}},
		{name: "more than kept", size: 3, recorded: 7, n: 100, want: []string{"t4", "t5", "t6"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := audit.New(audit.Options{Size: tc.size, Now: func() time.Time { return t0 }})
			for i := range tc.recorded {
				l.Record(context.Background(), audit.Entry{Actor: "ops", Action: audit.ActionReset, Target: "t" + string(rune('0'+i))})
			}
			got := []string{}
			for _, e := range l.Last(tc.n) {
				got = append(got, e.Target)
				if !e.Time.Equal(t0) {
					t.Errorf("entry %s stamped %v, want %v", e.Target, e.Time, t0)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Last(%d) = %v, want %v", tc.n, got, tc.want)
			}
		})
	}
}

// TestRecordWritesJSONLines checks that every entry reaches the logger as
// one JSON line with its fields, Before and After as JSON values.
func TestRecordWritesJSONLines(t *testing.T) {
	var out logtest.Buffer
	l := audit.New(audit.Options{Logger: slog.New(slog.NewJSONHandler(&out, nil)), Now: func() time.Time { return t0 }})
	type state struct {
		Hash string `json:"hash"`
	}
	l.Record(context.Background(), audit.Entry{
		Actor: "alice", Action: audit.ActionOverrideCreate, Target: "ov1",
		After: map[string]any{"multiplier": 5}, Reason: "launch",
	})
	l.Record(context.Background(), audit.Entry{
		Time:  t0.Add(time.Second).In(time.FixedZone("CET", 3600)),
		Actor: "reload", Action: audit.ActionReload, Before: state{"a"}, After: state{"b"},
	})

	sc := bufio.NewScanner(strings.NewReader(out.String()))
	var lines []map[string]any
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		delete(m, "time") // the handler's own clock
		lines = append(lines, m)
	}
	want := []map[string]any{
		{"level": "INFO", "msg": "audit", "at": "2026-11-25T10:00:00Z", "actor": "alice", "action": "override.create",
			"target": "ov1", "after": map[string]any{"multiplier": 5.0}, "reason": "launch"},
		{"level": "INFO", "msg": "audit", "at": "2026-11-25T10:00:01Z", "actor": "reload", "action": "reload",
			"before": map[string]any{"hash": "a"}, "after": map[string]any{"hash": "b"}},
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("audit lines:\n got %v\nwant %v", lines, want)
	}
}

// yielding is a slog.Handler that yields the processor before it
// writes, so that a writer racing another between keeping an entry and
// logging it is overtaken at once.
type yielding struct{ slog.Handler }

func (h yielding) Handle(ctx context.Context, r slog.Record) error {
	runtime.Gosched()
	return h.Handler.Handle(ctx, r)
}

// TestConcurrentRecordsKeepOneOrder records from many goroutines and
// checks that the log's lines come in the order Last returns them.
func TestConcurrentRecordsKeepOneOrder(t *testing.T) {
	var buf logtest.Buffer
	const writers, each = 8, 100
	l := audit.New(audit.Options{Size: writers * each, Logger: slog.New(yielding{slog.NewJSONHandler(&buf, nil)})})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				l.Record(context.Background(), audit.Entry{Actor: "ops", Action: audit.ActionReset, Target: fmt.Sprintf("%d-%d", w, i)})
			}
		})
	}
	wg.Wait()
	var logged []string
	sc := bufio.NewScanner(strings.NewReader(buf.String()))
	for sc.Scan() {
		var line struct{ Target string }
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		logged = append(logged, line.Target)
	}
	var kept []string
	for _, e := range l.Last(0) {
		kept = append(kept, e.Target)
	}
	if len(logged) != writers*each || !reflect.DeepEqual(logged, kept) {
		t.Fatalf("%d lines logged in another order than the %d entries kept", len(logged), len(kept))
	}
}
