package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/cli"
	"github.com/tollgatehq/tollgate/pkg/record"
)

// loadRules count every client's calls in a window of a year, with a
// limit no run reaches: what remains tells how many calls of a client
// were decided.
const loadRules = `domain: bench
descriptors:
  - key: client
    rate_limit: {unit: year, requests_per_unit: 4000000000, algorithm: fixed_window, name: per_client}
`

// loadLimit is loadRules' requests_per_unit.
const loadLimit = 4000000000

// loadKeys is the number of clients the bench sends as, k0 to k7.
const loadKeys = 8

// benchResult is what `tollgate bench` prints that these tests read.
type benchResult struct {
	Requests     int64            `json:"requests"`
	OK           int64            `json:"ok"`
	OverLimit    int64            `json:"over_limit"`
	Errors       int64            `json:"errors"`
	ErrorsByCode map[string]int64 `json:"errors_by_code"`
	RPS          float64          `json:"rps"`
	Duration     float64          `json:"duration_seconds"`
}

// TestRecordingUnderLoad records what `tollgate bench` sends at its full
// rate, closed loop over gRPC. When the file keeps up, every answered
// call is in it, each client's as many as the store counted. When it
// does not (a pipe nobody reads), every call is still answered, and what
// the file got plus what the recorder counted dropped is every call.
// That no decision waits for the file is BenchmarkCheck's to show
// (recorder=full against none): this test times nothing.
func TestRecordingUnderLoad(t *testing.T) {
	t.Run("the disk keeps up", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "calls.jsonl")
		svc := startRecording(t, path)
		res := bench(t, svc.grpcAddr, "--duration", "2s")
		t.Logf("%d decisions in %.1f s: %.0f a second, recorded", res.Requests, res.Duration, res.RPS)

		st := stopRecording(t, svc)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		perClient := readCalls(t, f)
		if got := sum(perClient); got != res.Requests || st.Lines != res.Requests {
			t.Errorf("%d calls in the file, %d lines in the status; %d decisions answered", got, st.Lines, res.Requests)
		}
		if dropped := recordDropped(t, svc); st.Dropped != 0 || dropped != 0 {
			t.Errorf("dropped %d (status), %d (tollgate_record_dropped_total); want 0", st.Dropped, dropped)
		}
		for i := range loadKeys {
			client := fmt.Sprintf("k%d", i)
			if got, want := perClient[client], decided(t, svc, client); got != want {
				t.Errorf("client %s: %d calls in the file, %d counted by the store", client, got, want)
			}
		}
	})

	t.Run("the disk does not keep up", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "calls.jsonl")
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
		// The read end is opened first, so that the recorder's open does
		// not wait for a reader; nothing reads it during the load, so the
		// pipe fills, then the writer's buffer, then the queue.
		fifo, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		svc := startRecording(t, path)
		// Closed before the App stops, so that a writer still stuck on
		// the pipe (the test failed) fails its write instead of holding
		// the stop.
		t.Cleanup(func() { fifo.Close() })
		// Half a queue more calls than the queue holds overflow it
		// whatever the machine's speed: the pipe (64 KiB) and the
		// writer's buffer (64 KiB) hold under 800 of these lines of
		// about 170 bytes. The duration only bounds a run whose calls
		// stall.
		n := record.DefaultQueue * 3 / 2
		res := bench(t, svc.grpcAddr, "--requests", strconv.Itoa(n), "--duration", "30s")
		t.Logf("%d decisions in %.1f s: %.0f a second, the recording stalled", res.Requests, res.Duration, res.RPS)
		if res.Requests != int64(n) {
			t.Fatalf("%d calls answered, %d sent", res.Requests, n)
		}

		// Drain the pipe while the recording stops: the stop writes what
		// is queued and closes the file, which ends the read (as the
		// cleanup's close does, should the test fail first).
		type drained struct {
			b   []byte
			err error
		}
		read := make(chan drained, 1)
		go func() {
			b, err := io.ReadAll(fifo)
			read <- drained{b, err}
		}()
		st := stopRecording(t, svc)
		out := <-read
		if out.err != nil {
			t.Fatalf("reading the pipe: %v", out.err)
		}
		perClient := readCalls(t, bytes.NewReader(out.b))
		lines, dropped := sum(perClient), recordDropped(t, svc)
		t.Logf("%d lines written, %d dropped", lines, st.Dropped)
		if st.Lines != lines {
			t.Errorf("%d calls read from the pipe, %d lines in the status", lines, st.Lines)
		}
		if dropped != st.Dropped {
			t.Errorf("tollgate_record_dropped_total %d, the status says %d", dropped, st.Dropped)
		}
		if st.Dropped == 0 {
			t.Errorf("nothing dropped with the pipe unread")
		}
		if lines+st.Dropped != res.Requests {
			t.Errorf("%d lines + %d dropped = %d, want the %d decisions answered", lines, st.Dropped, lines+st.Dropped, res.Requests)
		}
	})
}

// startRecording runs a tollgate serving loadRules, with the admin API
// on, that records into path from the start.
func startRecording(t *testing.T, path string) *service {
	t.Helper()
	return startService(t, map[string]string{"bench.yaml": loadRules}, func(s *app.Settings) {
		s.Record.File, s.Admin.Token = path, apptest.EnvToken
	})
}

// bench runs `tollgate bench` against addr as loadKeys clients, closed
// loop, with args added, and returns what it printed. Every call must be
// answered.
func bench(t *testing.T, addr string, args ...string) benchResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"bench", "--addr", addr, "--domain", "bench", "--descriptor", "client=k{key}",
		"--keys", strconv.Itoa(loadKeys), "--concurrency", "32", "--conns", "2"}, args...)
	if code := cli.MainEnv(t.Context(), args, &stdout, &stderr, func(string) string { return "" }); code != 0 {
		t.Fatalf("tollgate %s: exit %d\n%s", strings.Join(args, " "), code, stderr.String())
	}
	var res benchResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("reading the bench's result: %v\n%s", err, stdout.String())
	}
	if res.Errors != 0 || res.Requests == 0 || res.OK != res.Requests {
		t.Fatalf("bench: %d calls, %d OK, %d failed %v; want every call answered OK", res.Requests, res.OK, res.Errors, res.ErrorsByCode)
	}
	return res
}

// stopRecording stops the recording through the admin API, once its
// lines are written, and returns its final status.
func stopRecording(t *testing.T, svc *service) record.Status {
	t.Helper()
	url := "http://" + svc.adminAddr + "/v1/record"
	if code := apptest.Send(t, http.MethodDelete, url, apptest.EnvToken, ""); code != http.StatusOK {
		t.Fatalf("DELETE /v1/record: %d, want 200", code)
	}
	var st record.Status
	if code := apptest.GetJSON(t, url, apptest.EnvToken, &st); code != http.StatusOK || st.On {
		t.Fatalf("GET /v1/record after the stop: %d %+v", code, st)
	}
	return st
}

// readCalls decodes a recording and returns its call lines by client.
func readCalls(t *testing.T, r io.Reader) map[string]int64 {
	t.Helper()
	rd := record.NewReader(r)
	calls := map[string]int64{}
	for {
		l, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return calls
		}
		if err != nil {
			t.Fatal(err)
		}
		if l.Call != nil {
			calls[l.Call.Descriptors[0].Entries[0].Value]++
		}
	}
}

func sum(counts map[string]int64) int64 {
	var n int64
	for _, c := range counts {
		n += c
	}
	return n
}

// recordDropped returns tollgate_record_dropped_total from /metrics; 0
// while nothing was dropped.
func recordDropped(t *testing.T, svc *service) int64 {
	t.Helper()
	var n int64
	for line := range strings.Lines(svc.get(t, svc.httpAddr, "/metrics")) {
		name, _, _ := strings.Cut(line, " ")
		if name != "tollgate_record_dropped_total" && !strings.HasPrefix(name, "tollgate_record_dropped_total{") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("reading %q: %v", line, err)
		}
		n += int64(v)
	}
	return n
}

// decided returns how many calls of client the store counted, from what
// remains of its limit (POST /v1/remaining, which counts nothing).
func decided(t *testing.T, svc *service, client string) int64 {
	t.Helper()
	body := fmt.Sprintf(`{"domain":"bench","descriptors":[{"entries":[{"key":"client","value":%q}]}]}`, client)
	var out struct {
		Statuses []struct {
			Remaining *uint32 `json:"remaining"`
		} `json:"statuses"`
	}
	if code := apptest.SendJSON(t, http.MethodPost, "http://"+svc.adminAddr+"/v1/remaining", apptest.EnvToken, body, &out); code != http.StatusOK {
		t.Fatalf("POST /v1/remaining: %d", code)
	}
	if len(out.Statuses) != 1 || out.Statuses[0].Remaining == nil {
		t.Fatalf("POST /v1/remaining for %s: %+v, want one status with what remains", client, out)
	}
	return loadLimit - int64(*out.Statuses[0].Remaining)
}
