package integration

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/cli"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/record"
)

// replayRules is an hourly fixed window per client: a window is counted
// from the recorded call times alone, so an independent count of the
// same traffic gives exactly what a replay must.
const replayRules = `
domain: api
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: %d, algorithm: fixed_window}
`

// TestReplayCountsLikeAnIndependentCount records the traffic of twelve
// clients through a running tollgate, replays it through the same rule
// with a lower and with a higher limit, and checks the report's numbers
// against a count of the recorded calls by hand; the CI gate fails the
// lower limit and passes the higher one.
func TestReplayCountsLikeAnIndependentCount(t *testing.T) {
	const limit, lower, higher = 10, 6, 14
	file := filepath.Join(t.TempDir(), "traffic.jsonl")
	svc := startService(t, map[string]string{"api.yaml": fmt.Sprintf(replayRules, limit)}, func(s *app.Settings) {
		s.Record.File, s.Record.OnStart = file, true
	})
	rng := rand.New(rand.NewPCG(7, 23))
	rejectedLive := map[string]int64{}
	calls := 0
	for range 240 {
		client := fmt.Sprintf("c%02d", rng.IntN(12))
		resp := svc.query(t, "api", []descriptor.Entry{{Key: "client", Value: client}})
		calls++
		if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			rejectedLive[client]++
		}
	}
	if err := svc.stop(); err != nil { // writes the recording's last lines
		t.Fatal(err)
	}

	// The independent count: each client's recorded calls by hourly
	// window, the first n of a window admitted.
	times := map[string][]int64{}
	rd := record.NewReader(bytes.NewReader(readFile(t, file)))
	for {
		l, err := rd.Next()
		if err != nil {
			break
		}
		if c := l.Call; c != nil {
			times[c.Descriptors[0].Entries[0].Value] = append(times[c.Descriptors[0].Entries[0].Value], c.Time)
		}
	}
	rejected := func(n int64) map[string]int64 {
		out := map[string]int64{}
		for client, ts := range times {
			perWindow := map[int64]int64{}
			for _, t := range ts {
				perWindow[t/time.Hour.Microseconds()]++
			}
			for _, k := range perWindow {
				if k > n {
					out[client] += k - n
				}
			}
		}
		return out
	}
	sum := func(m map[string]int64) (s int64) {
		for _, v := range m {
			s += v
		}
		return s
	}
	if got := len(times); got == 0 || sum(rejectedLive) == 0 {
		t.Fatalf("recorded %d clients, %d rejections live", got, sum(rejectedLive))
	}

	for _, tt := range []struct {
		name  string
		limit int64
		code  int
	}{
		{"lower", lower, 1},
		{"higher", higher, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "api.yaml"), fmt.Sprintf(replayRules, tt.limit))
			var stdout, stderr bytes.Buffer
			code := cli.MainEnv(context.Background(), []string{"replay", "--traffic", file, "--config-dir", dir,
				"--json", "--max-new-rejections", "1"}, &stdout, &stderr, func(string) string { return "" })
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.code, stderr.String())
			}
			if tt.code == 1 && !strings.Contains(stderr.String(), "would newly be rejected") {
				t.Errorf("stderr = %q, want why the gate failed", stderr.String())
			}
			var rep record.Report
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("%v in %s", err, stdout.String())
			}
			after := rejected(tt.limit)
			// Fixed windows make both directions exact: a lower limit
			// rejects every call the higher one did, and more.
			newly, admitted := map[string]int64{}, map[string]int64{}
			for client := range times {
				if d := after[client] - rejectedLive[client]; d > 0 {
					newly[client] = d
				} else if d < 0 {
					admitted[client] = -d
				}
			}
			row := rep.Row("api", "client")
			want := record.RuleReport{Domain: "api", Rule: "client", RequestsBefore: int64(calls), Requests: int64(calls),
				RejectedBefore: sum(rejectedLive), RejectedAfter: sum(after),
				NewlyRejected: record.Clients{Total: sum(newly), Clients: len(newly), Top: top(newly, 10)},
				NewlyAdmitted: record.Clients{Total: sum(admitted), Clients: len(admitted), Top: top(admitted, 10)}}
			if fmt.Sprint(row) != fmt.Sprint(want) {
				t.Fatalf("rule row\n%+v\nwant\n%+v", row, want)
			}
			if rep.Calls != int64(calls) || rep.RejectedBefore != sum(rejectedLive) || rep.RejectedAfter != sum(after) ||
				rep.NewlyRejected != sum(newly) || rep.NewlyAdmitted != sum(admitted) {
				t.Fatalf("report totals %+v", rep)
			}
		})
	}
}

// top returns the n clients of the highest counts, as a report lists them.
func top(counts map[string]int64, n int) []record.ClientCount {
	out := []record.ClientCount{}
	for c, k := range counts {
		out = append(out, record.ClientCount{Client: c, Count: k})
	}
	slices.SortFunc(out, func(a, b record.ClientCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Client, b.Client))
	})
	return out[:min(n, len(out))]
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
