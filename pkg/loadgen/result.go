package loadgen

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Result is the outcome of a run. Latencies are in microseconds.
type Result struct {
	// Mode is "closed" or "open".
	Mode string `json:"mode"`
	// Requests is the number of recorded requests: OK + OverLimit + Errors.
	Requests int64 `json:"requests"`
	// DurationSeconds runs from the end of the warm-up to the last recorded
	// answer.
	DurationSeconds float64 `json:"duration_seconds"`
	// RPS is Requests / DurationSeconds.
	RPS float64 `json:"rps"`
	// OK counts answers with overall_code OK, and UNKNOWN, which Envoy
	// treats as OK.
	OK int64 `json:"ok"`
	// OverLimit counts answers with overall_code OVER_LIMIT.
	OverLimit int64 `json:"over_limit"`
	// Errors counts calls that failed, including timeouts.
	Errors int64 `json:"errors"`
	// ErrorsByCode counts the failed calls by gRPC code name, such as
	// "DeadlineExceeded".
	ErrorsByCode map[string]int64 `json:"errors_by_code"`
	// OverallUnknown counts answers with overall_code UNKNOWN (0), which a
	// service should never send; they are also counted in OK.
	OverallUnknown int64 `json:"overall_unknown"`
	// Degraded counts answers with the response header
	// X-RateLimit-Policy: degraded, which tollgate adds when a failure mode
	// decided instead of its store; they are also counted in OK or
	// OverLimit.
	Degraded int64 `json:"degraded"`
	// WarmupRequests counts the requests sent during the warm-up.
	WarmupRequests int64 `json:"warmup_requests"`
	// Late counts open-loop requests that waited more than 1 ms past their
	// scheduled time for a free worker; their latency includes the wait.
	Late int64 `json:"late"`
	// Unsent counts open-loop requests scheduled within the run that were
	// never sent because the service fell behind by more than Timeout.
	Unsent int64 `json:"unsent"`
	// Latency summarizes the latency of recorded requests. It runs from
	// the send, except for open-loop requests that had to wait for a free
	// worker: theirs runs from the scheduled time.
	Latency Latency `json:"latency_us"`
	// ClientCPUSeconds is the CPU time of this process during the run,
	// warm-up included; 0 where it cannot be measured.
	ClientCPUSeconds float64 `json:"client_cpu_seconds"`
	// ClientCPUPerRequestUS is ClientCPUSeconds per request sent, warm-up
	// included, in microseconds.
	ClientCPUPerRequestUS float64 `json:"client_cpu_us_per_request"`
	// Options are the options of the run, defaults filled in.
	Options Options `json:"options"`
	// KeyCounts, with Options.KeyWindow, holds every key's answers in
	// every window it was sent in, by key, then window.
	KeyCounts []KeyCount `json:"key_counts,omitempty"`
}

// KeyCount is one key's OK and OVER_LIMIT answers to the calls sent in
// one window of Options.KeyWindow (failed calls are not counted). A call
// was decided between its send and its answer, so an OK answered after
// its window ended (OKLate) may have been counted by the service in the
// next window; the others were decided within theirs. Times are Unix
// microseconds.
type KeyCount struct {
	Key       uint64 `json:"key"`
	Start     int64  `json:"start_us"`
	OK        int64  `json:"ok"`
	OverLimit int64  `json:"over_limit"`
	OKLate    int64  `json:"ok_late"`
	// First and Last are the send times of the window's first and last
	// counted call.
	First int64 `json:"first_us"`
	Last  int64 `json:"last_us"`
}

// keyWindow names one key's window: the key and the window's start.
type keyWindow struct {
	key   uint64
	start int64
}

// keyCounter counts one worker's answers by key and window.
type keyCounter struct {
	window int64 // µs
	counts map[keyWindow]*KeyCount
}

// count adds the answer a to key's call sent at sent and answered at
// done.
func (c *keyCounter) count(key uint64, sent, done time.Time, a answer) {
	at := sent.UnixMicro()
	id := keyWindow{key, at - at%c.window}
	kc := c.counts[id]
	if kc == nil {
		kc = &KeyCount{Key: key, Start: id.start, First: at}
		c.counts[id] = kc
	}
	kc.First, kc.Last = min(kc.First, at), max(kc.Last, at)
	if a.overall == uint64(rlsv3.RateLimitResponse_OVER_LIMIT) {
		kc.OverLimit++
		return
	}
	kc.OK++
	if done.UnixMicro() >= id.start+c.window {
		kc.OKLate++
	}
}

// mergeKeyCounts merges the workers' counts, sorted by key and window.
func mergeKeyCounts(counters []*keyCounter) []KeyCount {
	sets := make([][]KeyCount, len(counters))
	for i, c := range counters {
		for _, kc := range c.counts {
			sets[i] = append(sets[i], *kc)
		}
	}
	return MergeKeyCounts(sets...)
}

// MergeKeyCounts adds up counts of the same key and window, such as those
// of several load processes that sent the same keys, and returns them
// sorted by key and window.
func MergeKeyCounts(sets ...[]KeyCount) []KeyCount {
	all := map[keyWindow]*KeyCount{}
	for _, set := range sets {
		for _, kc := range set {
			id := keyWindow{kc.Key, kc.Start}
			m := all[id]
			if m == nil {
				all[id] = &kc
				continue
			}
			m.OK += kc.OK
			m.OverLimit += kc.OverLimit
			m.OKLate += kc.OKLate
			m.First, m.Last = min(m.First, kc.First), max(m.Last, kc.Last)
		}
	}
	out := make([]KeyCount, 0, len(all))
	for _, kc := range all {
		out = append(out, *kc)
	}
	slices.SortFunc(out, func(a, b KeyCount) int {
		if c := cmp.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Start, b.Start)
	})
	return out
}

// Latency is a latency summary in microseconds. Percentiles come from an
// HDR histogram with three significant digits; Max and Mean are exact.
type Latency struct {
	P50  int64   `json:"p50"`
	P90  int64   `json:"p90"`
	P99  int64   `json:"p99"`
	P999 int64   `json:"p999"`
	Max  int64   `json:"max"`
	Mean float64 `json:"mean"`
}

// maxLatencyUS is the largest latency the histograms hold; larger ones are
// recorded as this value.
const maxLatencyUS = int64(time.Hour / time.Microsecond)

// newHistogram returns an empty latency histogram.
func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, maxLatencyUS, 3)
}

// histogramShard is a histogram shared by a few workers.
type histogramShard struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

// tally is one worker's counts. Only its worker writes it; Run reads it
// after the worker has stopped.
type tally struct {
	ok, overLimit, unknown, errors int64
	degraded                       int64
	errorsByCode                   map[codes.Code]int64
	warmup, late, unsent           int64
	sumUS, maxUS                   int64
	lastDone                       time.Time
}

// record counts one recorded call that ended at done after latency with
// answer a, or failed with err.
func (t *tally) record(shard *histogramShard, latency time.Duration, done time.Time, a answer, err error) {
	if err == nil && a.degraded {
		t.degraded++
	}
	switch {
	case err != nil:
		t.errors++
		if t.errorsByCode == nil {
			t.errorsByCode = make(map[codes.Code]int64)
		}
		t.errorsByCode[status.Code(err)]++
	case a.overall == uint64(rlsv3.RateLimitResponse_OVER_LIMIT):
		t.overLimit++
	case a.overall == uint64(rlsv3.RateLimitResponse_UNKNOWN):
		t.unknown++
		t.ok++
	default:
		t.ok++
	}
	us := min(max(latency.Microseconds(), 0), maxLatencyUS)
	t.sumUS += us
	t.maxUS = max(t.maxUS, us)
	if done.After(t.lastDone) {
		t.lastDone = done
	}
	shard.mu.Lock()
	_ = shard.h.RecordValue(us) // us is within the histogram's range
	shard.mu.Unlock()
}

// add adds u's counts to t.
func (t *tally) add(u *tally) {
	t.ok += u.ok
	t.overLimit += u.overLimit
	t.unknown += u.unknown
	t.errors += u.errors
	t.degraded += u.degraded
	for c, n := range u.errorsByCode {
		if t.errorsByCode == nil {
			t.errorsByCode = make(map[codes.Code]int64)
		}
		t.errorsByCode[c] += n
	}
	t.warmup += u.warmup
	t.late += u.late
	t.unsent += u.unsent
	t.sumUS += u.sumUS
	t.maxUS = max(t.maxUS, u.maxUS)
	if u.lastDone.After(t.lastDone) {
		t.lastDone = u.lastDone
	}
}

// result builds a Result from the merged tally and histogram of a run whose
// measurement started at measureStart.
func (t *tally) result(opts Options, h *hdrhistogram.Histogram, measureStart time.Time, cpu time.Duration) *Result {
	r := &Result{
		Mode:           "closed",
		Requests:       t.ok + t.overLimit + t.errors,
		OK:             t.ok,
		OverLimit:      t.overLimit,
		Errors:         t.errors,
		ErrorsByCode:   make(map[string]int64, len(t.errorsByCode)),
		OverallUnknown: t.unknown,
		Degraded:       t.degraded,
		WarmupRequests: t.warmup,
		Late:           t.late,
		Unsent:         t.unsent,
		Options:        opts,
	}
	if opts.Rate > 0 {
		r.Mode = "open"
	}
	for c, n := range t.errorsByCode {
		r.ErrorsByCode[c.String()] = n
	}
	if r.Requests > 0 {
		if d := t.lastDone.Sub(measureStart); d > 0 {
			r.DurationSeconds = d.Seconds()
			r.RPS = float64(r.Requests) / r.DurationSeconds
		}
		p := h.ValueAtPercentilesSlice([]float64{50, 90, 99, 99.9})
		for i := range p {
			p[i] = min(p[i], t.maxUS) // a bucket's upper end may exceed the exact max
		}
		r.Latency = Latency{
			P50: p[0], P90: p[1], P99: p[2], P999: p[3],
			Max:  t.maxUS,
			Mean: float64(t.sumUS) / float64(r.Requests),
		}
	}
	r.ClientCPUSeconds = cpu.Seconds()
	if sent := r.Requests + r.WarmupRequests; sent > 0 {
		r.ClientCPUPerRequestUS = float64(cpu.Microseconds()) / float64(sent)
	}
	return r
}
