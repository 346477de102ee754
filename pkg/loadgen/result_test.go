package loadgen

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestResultJSON(t *testing.T) {
	res := &Result{
		Mode: "open", Requests: 1000, DurationSeconds: 0.5, RPS: 2000, OK: 900, OverLimit: 90, Errors: 10,
		ErrorsByCode: map[string]int64{"DeadlineExceeded": 10}, OverallUnknown: 1, Degraded: 25, WarmupRequests: 200,
		Late: 3, Unsent: 0,
		Latency:          Latency{P50: 120, P90: 250, P99: 900, P999: 1500, Max: 2100, Mean: 160.5},
		ClientCPUSeconds: 0.02, ClientCPUPerRequestUS: 16.7,
		Options: Options{
			Addr: "127.0.0.1:8081", Domain: "api", Descriptors: []string{"api_key=k{key},endpoint=/search"},
			Keys: 1000, Distribution: Zipf, ZipfS: 1.1, Concurrency: 16, Conns: 1, Rate: 2000,
			Duration: 500 * time.Millisecond, Warmup: 100 * time.Millisecond, Hits: 1, Timeout: time.Second, Seed: 9,
		},
	}
	got, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	const want = `{
  "mode": "open",
  "requests": 1000,
  "duration_seconds": 0.5,
  "rps": 2000,
  "ok": 900,
  "over_limit": 90,
  "errors": 10,
  "errors_by_code": {
    "DeadlineExceeded": 10
  },
  "overall_unknown": 1,
  "degraded": 25,
  "warmup_requests": 200,
  "late": 3,
  "unsent": 0,
  "latency_us": {
    "p50": 120,
    "p90": 250,
    "p99": 900,
    "p999": 1500,
    "max": 2100,
    "mean": 160.5
  },
  "client_cpu_seconds": 0.02,
  "client_cpu_us_per_request": 16.7,
  "options": {
    "addr": "127.0.0.1:8081",
    "domain": "api",
    "descriptors": [
      "api_key=k{key},endpoint=/search"
    ],
    "keys": 1000,
    "distribution": "zipf",
    "zipf_s": 1.1,
    "concurrency": 16,
    "conns": 1,
    "rate": 2000,
    "duration": "500ms",
    "requests": 0,
    "warmup": "100ms",
    "hits": 1,
    "timeout": "1s",
    "seed": 9
  }
}`
	if string(got) != want {
		t.Errorf("JSON =\n%s\nwant\n%s", got, want)
	}
}

func TestTallyResult(t *testing.T) {
	start := time.Unix(1000, 0)
	shard := &histogramShard{h: newHistogram()}
	var a, b tally
	for i := range 100 {
		a.record(shard, time.Duration(i+1)*time.Millisecond, start.Add(time.Second), answer{overall: 1, degraded: i < 3}, nil)
	}
	b.record(shard, 5*time.Millisecond, start.Add(2*time.Second), answer{overall: 2, degraded: true}, nil)
	b.record(shard, 7*time.Millisecond, start.Add(time.Second), answer{}, nil)
	// A failed call is not degraded, whatever its exchange held before.
	b.record(shard, 2*time.Hour, start.Add(time.Second), answer{degraded: true}, status.Error(codes.Unavailable, "down"))
	b.warmup = 4

	total := &tally{}
	total.add(&a)
	total.add(&b)
	h := hdrhistogram.New(1, maxLatencyUS, 3)
	h.Merge(shard.h)
	res := total.result(Options{}, h, start, 52*time.Millisecond)

	if res.Requests != 103 || res.OK != 101 || res.OverLimit != 1 || res.Errors != 1 || res.OverallUnknown != 1 {
		t.Errorf("requests %d ok %d over %d errors %d unknown %d, want 103 101 1 1 1",
			res.Requests, res.OK, res.OverLimit, res.Errors, res.OverallUnknown)
	}
	if res.Degraded != 4 {
		t.Errorf("degraded %d, want 4", res.Degraded)
	}
	if res.ErrorsByCode["Unavailable"] != 1 || res.Mode != "closed" {
		t.Errorf("errors_by_code %v, mode %s", res.ErrorsByCode, res.Mode)
	}
	if res.DurationSeconds != 2 || res.RPS != 51.5 {
		t.Errorf("duration %g rps %g, want 2 and 51.5", res.DurationSeconds, res.RPS)
	}
	// An answer after an hour or more is recorded as one hour.
	if res.Latency.Max != maxLatencyUS || res.Latency.P50 < 49000 || res.Latency.P50 > 51100 {
		t.Errorf("latency %+v: want max %d, p50 about 50 ms", res.Latency, maxLatencyUS)
	}
	if res.ClientCPUSeconds != 0.052 || res.ClientCPUPerRequestUS != 52000.0/107 {
		t.Errorf("cpu %g s, %g µs/request; want 0.052 and %g", res.ClientCPUSeconds, res.ClientCPUPerRequestUS, 52000.0/107)
	}
}
