package record_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"testing/synctest"
	"time"

	"github.com/tollgatehq/tollgate/internal/metrictest"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/record"
)

var t0 = time.Date(2026, 11, 28, 17, 0, 0, 123456000, time.UTC)

// domain returns the domain api of a rule set whose shard_by is tenant.
func domain(t *testing.T) *descriptor.Domain {
	t.Helper()
	tree, err := descriptor.LoadFS(fstest.MapFS{"api.yaml": {Data: []byte(`
domain: api
shard_by: tenant
descriptors:
  - key: path
    descriptors:
      - key: tenant
        rate_limit: {unit: minute, requests_per_unit: 5}
`)}}, descriptor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tree.Domain("api")
}

// call returns a request of tenant on path /a and its answer.
func call(tenant string, code limiter.Code) (*limiter.Request, *limiter.Response) {
	rule := &descriptor.Rule{Path: "path/tenant"}
	req := &limiter.Request{Domain: "api", Descriptors: []limiter.Descriptor{
		{Entries: []descriptor.Entry{{Key: "path", Value: "/a"}, {Key: "tenant", Value: tenant}}},
	}}
	resp := &limiter.Response{Code: code, Statuses: []limiter.Status{{Code: code, Rule: rule, Limit: &descriptor.Limit{Name: "per_minute"}}}}
	return req, resp
}

// readAll decodes a recording, failing the test on any error.
func readAll(t *testing.T, r io.Reader) (*record.Header, []record.Line) {
	t.Helper()
	rd := record.NewReader(r)
	var lines []record.Line
	for {
		l, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return rd.Header(), lines
		}
		if err != nil {
			t.Fatal(err)
		}
		if l.Type != record.TypeHeader {
			lines = append(lines, l)
		}
	}
}

func TestRecordsEveryField(t *testing.T) {
	var out bytes.Buffer
	live := override.Override{ID: "o1", Domain: "api", Entries: []descriptor.Entry{{Key: "path", Value: "/a"}},
		Multiplier: 2, ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}
	rec, err := record.New(record.Options{Output: &out, Now: func() time.Time { return t0 },
		Header: func() record.Header { return record.Header{RulesHash: "h1", Overrides: []override.Override{live}} }})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Start(record.Span{}); err != nil {
		t.Fatal(err)
	}
	req := &limiter.Request{Domain: "api", Hits: 3, Descriptors: []limiter.Descriptor{
		{Entries: []descriptor.Entry{{Key: "path", Value: "/a\"\n\x01é\xff"}, {Key: limiter.ChargeKey, Value: limiter.ChargeAlwaysValue}},
			Hits: 0, HasHits: true, Override: &limiter.Override{RequestsPerUnit: 7, Unit: descriptor.Minute, UnitMultiplier: 5}},
		{Entries: []descriptor.Entry{{Key: "x", Value: "y"}}, Hits: 2, HasHits: true, Refund: true},
		{Entries: []descriptor.Entry{{Key: "nomatch", Value: "z"}}},
	}}
	resp := &limiter.Response{Code: limiter.OverLimit, Statuses: []limiter.Status{
		{Code: limiter.OverLimit, Rule: &descriptor.Rule{Path: "path"}, Limit: &descriptor.Limit{Name: "per_minute"}},
		{Code: limiter.OK, Rule: &descriptor.Rule{Path: "x"}},
		{Code: limiter.OK},
	}}
	rec.Record(t0.Add(time.Microsecond), nil, req, resp)
	rec.Override(record.ChangeDeleted, live)
	st, err := rec.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if st.Lines != 2 || st.Dropped != 0 || st.On {
		t.Fatalf("status = %+v, want 2 lines, none dropped, off", st)
	}

	h, lines := readAll(t, &out)
	if h.Version != record.Version || h.RulesHash != "h1" || !h.Start.Equal(t0) || h.Sample != 1 || len(h.Overrides) != 1 || h.Overrides[0].ID != "o1" {
		t.Fatalf("header = %+v", h)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	zero, two := uint64(0), uint64(2)
	want := record.Call{Time: t0.UnixMicro() + 1, Domain: "api", Hits: 3, Code: "OVER_LIMIT", Descriptors: []record.Descriptor{
		{Entries: []descriptor.Entry{{Key: "path", Value: "/a\"\n\x01é\uFFFD"}, {Key: "tollgate.charge", Value: "always"}}, Hits: &zero,
			Override: &record.Override{RequestsPerUnit: 7, Unit: "minute", UnitMultiplier: 5}, Code: "OVER_LIMIT", Rule: "path", Limit: "per_minute"},
		{Entries: []descriptor.Entry{{Key: "x", Value: "y"}}, Hits: &two, Refund: true, Code: "OK", Rule: "x"},
		{Entries: []descriptor.Entry{{Key: "nomatch", Value: "z"}}, Code: "OK"},
	}}
	if !reflect.DeepEqual(lines[0].Call, &want) {
		t.Fatalf("call =\n%+v\nwant\n%+v", lines[0].Call, &want)
	}
	if o := lines[1].Override; o == nil || o.Change != record.ChangeDeleted || o.Override.ID != "o1" || o.Time != t0.UnixMicro() {
		t.Fatalf("override line = %+v", lines[1])
	}
}

func TestSamplesByClient(t *testing.T) {
	dom := domain(t)
	for _, key := range []string{"", "path"} {
		t.Run("key="+key, func(t *testing.T) {
			var out bytes.Buffer
			rec, err := record.New(record.Options{Output: &out, Key: key})
			if err != nil {
				t.Fatal(err)
			}
			if err := rec.Start(record.Span{Sample: 0.3}); err != nil {
				t.Fatal(err)
			}
			const clients, calls = 200, 5
			for i := range calls {
				for c := range clients {
					req, resp := call(fmt.Sprintf("tenant-%d", c), limiter.Code(1+i%2))
					rec.Record(t0, dom, req, resp)
				}
			}
			if _, err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			_, lines := readAll(t, &out)
			per := map[string]int{}
			for _, l := range lines {
				per[l.Call.Descriptors[0].Entries[1].Value]++
			}
			if key == "path" {
				// One client, /a, sampled whole or not at all.
				if len(lines) != 0 && len(lines) != clients*calls {
					t.Fatalf("%d lines, want all or none", len(lines))
				}
				return
			}
			for c, n := range per {
				if n != calls {
					t.Errorf("client %s: %d calls recorded, want all %d", c, n, calls)
				}
			}
			if len(per) < clients*2/10 || len(per) > clients*4/10 {
				t.Errorf("%d of %d clients recorded at sample 0.3", len(per), clients)
			}
		})
	}
}

func TestClient(t *testing.T) {
	dom := domain(t)
	req, _ := call("acme", limiter.OK)
	for _, tt := range []struct {
		key  string
		dom  *descriptor.Domain
		want string
	}{
		{"", dom, "acme"},      // the domain's shard_by
		{"", nil, "/a"},        // an unknown domain: the first entry
		{"path", dom, "/a"},    // --record-key wins
		{"missing", dom, "/a"}, // a key no descriptor has: the first entry
	} {
		if got := record.Client(tt.key, tt.dom, req); got != tt.want {
			t.Errorf("Client(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

func TestRotatesToOnePreviousFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	rec, err := record.New(record.Options{Path: path, MaxBytes: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Start(record.Span{}); err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := range n {
		req, resp := call(fmt.Sprintf("t%03d", i), limiter.OK)
		rec.Record(t0.Add(time.Duration(i)*time.Microsecond), nil, req, resp)
	}
	st, err := rec.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if st.Lines+st.Dropped != n {
		t.Fatalf("status = %+v, want %d lines written or dropped", st, n)
	}
	matches, _ := filepath.Glob(path + "*")
	if len(matches) != 2 {
		t.Fatalf("files %v, want the recording and one previous", matches)
	}
	var last int64
	for _, p := range []string{path + ".1", path} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", p, fi.Mode().Perm())
		}
		if fi.Size() > 2000 {
			t.Errorf("%s: %d bytes, past the bound of 2000", p, fi.Size())
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		_, lines := readAll(t, f)
		f.Close()
		if len(lines) == 0 {
			t.Fatalf("%s: no calls", p)
		}
		for _, l := range lines {
			if l.Call.Time <= last {
				t.Fatalf("%s: call at %d after %d: not the latest calls in order", p, l.Call.Time, last)
			}
			last = l.Call.Time
		}
	}
	if last != t0.UnixMicro()+n-1 {
		t.Fatalf("the newest file ends at %d, want the last call %d", last, t0.UnixMicro()+n-1)
	}

	// A new recording keeps the previous one as path.1.
	before, _ := os.ReadFile(path)
	if err := rec.Start(record.Span{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	if prev, _ := os.ReadFile(path + ".1"); !bytes.Equal(prev, before) {
		t.Fatal("a new recording did not keep the previous one as .1")
	}
}

// blockedWriter passes writes through until hold is called; from then
// on every Write blocks until release is closed, and began is closed
// when the first one blocks.
type blockedWriter struct {
	mu      sync.Mutex
	held    bool
	began   chan struct{}
	release chan struct{}
	buf     bytes.Buffer
}

func (w *blockedWriter) hold() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held = true
}

func (w *blockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	held := w.held
	if held && w.began != nil {
		close(w.began)
		w.began = nil
	}
	w.mu.Unlock()
	if held {
		<-w.release
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func TestFullQueueDropsAndCounts(t *testing.T) {
	mp, sum := metrictest.New(t)
	began := make(chan struct{})
	w := &blockedWriter{began: began, release: make(chan struct{})}
	rec, err := record.New(record.Options{Output: w, Queue: 4, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Start(record.Span{}); err != nil {
		t.Fatal(err)
	}
	w.hold()

	// The first line is taken by the writer goroutine, which then blocks
	// in Write; four more fill the queue; the rest are dropped at once.
	req, resp := call("acme", limiter.OK)
	rec.Record(t0, nil, req, resp)
	<-began // the writer goroutine flushes the line, and blocks
	const n = 20
	for range n - 1 {
		rec.Record(t0, nil, req, resp) // returns at once though the writer is blocked
	}
	if st := rec.Status(); st.Dropped != n-1-4 {
		t.Fatalf("status = %+v, want %d dropped", st, n-1-4)
	}
	if got := sum("tollgate_record_dropped"); got != n-1-4 {
		t.Fatalf("tollgate_record_dropped = %d, want %d", got, n-1-4)
	}
	close(w.release)
	st, err := rec.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if st.Lines != 5 || st.Dropped != n-5 {
		t.Fatalf("final status = %+v, want 5 lines and %d dropped", st, n-5)
	}
	if _, lines := readAll(t, &w.buf); len(lines) != 5 {
		t.Fatalf("%d lines in the file, want 5", len(lines))
	}
}

func TestStartStopErrors(t *testing.T) {
	none, err := record.New(record.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := none.Start(record.Span{}); !errors.Is(err, record.ErrNoFile) {
		t.Fatalf("Start without a file: %v, want ErrNoFile", err)
	}
	if _, err := none.Stop(); !errors.Is(err, record.ErrNotRecording) {
		t.Fatalf("Stop while off: %v, want ErrNotRecording", err)
	}
	rec, err := record.New(record.Options{Output: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		span record.Span
		want string
	}{
		{record.Span{Sample: 1.5}, "invalid recording: sample 1.5 is not in (0, 1]"},
		{record.Span{Sample: -0.1}, "invalid recording: sample -0.1 is not in (0, 1]"},
		{record.Span{Duration: -time.Second}, "invalid recording: negative duration -1s"},
	} {
		if err := rec.Start(tt.span); err == nil || err.Error() != tt.want || !errors.Is(err, record.ErrInvalid) {
			t.Errorf("Start(%+v) = %v, want %q", tt.span, err, tt.want)
		}
	}
	if err := rec.Start(record.Span{Duration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := rec.Start(record.Span{}); !errors.Is(err, record.ErrRecording) {
		t.Fatalf("a second Start: %v, want ErrRecording", err)
	}
	rec.Close()
	if st := rec.Status(); st.On || st.Until == nil {
		t.Fatalf("status after Close = %+v, want the last recording, off, with its end", st)
	}
}

func TestReaderErrors(t *testing.T) {
	const header = `{"type":"header","version":1,"rules_hash":"h","start":"2026-11-28T17:00:00Z","sample":1,"key":"","overrides":[]}` + "\n"
	const call = `{"type":"call","t":1,"domain":"api","hits":0,"code":"OK","descriptors":[{"entries":[{"key":"k","value":"v"}],"code":"OK"}]}` + "\n"
	for _, tt := range []struct {
		name, in, want string
	}{
		{"empty", "", "line 1: no header: malformed recording"},
		{"call first", call, `line 1: type "call" before the header: malformed recording`},
		{"not json", header + "nope\n", "line 2: not a JSON object: invalid character 'o' in literal null (expecting 'u') (at byte 1): malformed recording"},
		{"unknown type", header + `{"type":"x"}` + "\n", `line 2: unknown type "x": malformed recording`},
		{"second header", header + header, "line 2: a second header: malformed recording"},
		{"version", strings.Replace(header, `"version":1`, `"version":2`, 1), "line 1: version 2, this tollgate reads 1: malformed recording"},
		{"sample", strings.Replace(header, `"sample":1`, `"sample":0`, 1), "line 1: sample 0 not in (0, 1]: malformed recording"},
		{"unknown field", header + strings.Replace(call, `"t":1`, `"t":1,"x":2`, 1), `line 2: unknown field "/x": malformed recording`},
		{"trailing data", header + strings.TrimSuffix(call, "\n") + " {}\n", "line 2: not a JSON object: invalid character '{' after top-level value (at byte 124): malformed recording"},
		{"no domain", header + strings.Replace(call, `"api"`, `""`, 1), "line 2: call without a domain: malformed recording"},
		{"no descriptors", header + `{"type":"call","t":1,"domain":"api","hits":0,"code":"OK","descriptors":[]}` + "\n", "line 2: call without descriptors: malformed recording"},
		{"no entries", header + strings.Replace(call, `[{"key":"k","value":"v"}]`, `[]`, 1), "line 2: descriptor 0 without entries: malformed recording"},
		{"call code", header + strings.Replace(call, `"OK"`, `"MAYBE"`, 1), `line 2: code "MAYBE" (want OK or OVER_LIMIT): malformed recording`},
		{"descriptor code", header + strings.Replace(call, `"code":"OK"}`, `"code":"MAYBE"}`, 1), `line 2: descriptor 0: code "MAYBE" (want OK or OVER_LIMIT): malformed recording`},
		{"repeated field", header + strings.Replace(call, `"t":1`, `"t":1,"t":2`, 1), `line 2: field "/t": duplicate object member name: malformed recording`},
		{"unit", header + strings.Replace(call, `"value":"v"}],"code"`, `"value":"v"}],"override":{"requests_per_unit":1,"unit":"fortnight"},"code"`, 1),
			`line 2: descriptor 0: override: unknown unit "fortnight" (want second, minute, hour, day, week, month or year): malformed recording`},
		{"change", header + `{"type":"override","t":1,"change":"moved","override":{"id":"o"}}` + "\n", `line 2: change "moved" (want created or deleted): malformed recording`},
		{"override id", header + `{"type":"override","t":1,"change":"created","override":{}}` + "\n", "line 2: override without an id: malformed recording"},
		{"wrong type", header + strings.Replace(call, `"t":1`, `"t":"1"`, 1), `line 2: field "/t": a JSON string where int64 belongs: malformed recording`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rd := record.NewReader(strings.NewReader(tt.in))
			var err error
			for err == nil {
				_, err = rd.Next()
			}
			if err.Error() != tt.want || !errors.Is(err, record.ErrFormat) {
				t.Fatalf("error = %v\nwant    %s", err, tt.want)
			}
		})
	}
}

// TestStuckFile stops a recording whose file takes no writes: Stop
// returns after StopWait with ErrStuck and the status so far, a new
// recording is refused until the writes are done, and then starts.
func TestStuckFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		began := make(chan struct{})
		w := &blockedWriter{began: began, release: make(chan struct{})}
		rec, err := record.New(record.Options{Output: w, StopWait: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := rec.Start(record.Span{}); err != nil {
			t.Fatal(err)
		}
		w.hold()
		req := &limiter.Request{Domain: "api", Descriptors: []limiter.Descriptor{{Entries: []descriptor.Entry{{Key: "k", Value: "v"}}}}}
		rec.Record(t0, nil, req, &limiter.Response{Code: limiter.OK, Statuses: []limiter.Status{{Code: limiter.OK}}})
		<-began
		start := time.Now()
		st, err := rec.Stop()
		if !errors.Is(err, record.ErrStuck) || time.Since(start) != time.Minute || st.On {
			t.Fatalf("Stop = %+v, %v after %v; want ErrStuck after a minute", st, err, time.Since(start))
		}
		if err := rec.Start(record.Span{}); !errors.Is(err, record.ErrRecording) || !errors.Is(err, record.ErrStuck) {
			t.Fatalf("Start while the last writes hang = %v", err)
		}
		close(w.release)
		synctest.Wait()
		if st := rec.Status(); st.Lines != 1 {
			t.Fatalf("status once the file took the writes = %+v, want its line", st)
		}
		if err := rec.Start(record.Span{}); err != nil {
			t.Fatal(err)
		}
		rec.Close()
	})
}
