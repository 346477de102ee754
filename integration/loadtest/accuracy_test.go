package main

import (
	"reflect"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/loadgen"
)

// sec returns the Unix microseconds of second s.
func sec(s int64) int64 { return s * 1_000_000 }

// win returns key k's counts in key window s, sent over the whole window.
func win(k uint64, s, ok, over, late int64) keyCount {
	return keyCount{Key: k, Start: sec(s), OK: ok, OverLimit: over, OKLate: late, First: sec(s), Last: sec(s+1) - 1}
}

var (
	bucket20 = judgedLimit{requests: 20, period: time.Second, burst: 40} // r = 20/s, C = 60
	window5  = judgedLimit{fixedWindow: true, requests: 5, period: time.Minute}
)

func TestOverage(t *testing.T) {
	tests := []struct {
		name    string
		windows []keyCount
		limit   judgedLimit
		want    int64
	}{
		// C + r·1 s = 80 in one second.
		{"bucket, at the bound", []keyCount{win(1, 0, 80, 0, 0)}, bucket20, 0},
		{"bucket, one past", []keyCount{win(1, 0, 81, 0, 0)}, bucket20, 1},
		{"bucket, past only if the late OK was decided in time", []keyCount{win(1, 0, 81, 0, 1)}, bucket20, 0},
		// 60 + 20·3 = 120 over three seconds, 100 over two.
		{"bucket, three seconds at the bound", []keyCount{win(1, 0, 60, 0, 0), win(1, 1, 30, 0, 0), win(1, 2, 30, 0, 0)}, bucket20, 0},
		{"bucket, two seconds past", []keyCount{win(1, 0, 60, 0, 0), win(1, 1, 45, 0, 0)}, bucket20, 5},
		// An empty second between refills 20 more.
		{"bucket, across a gap", []keyCount{win(1, 0, 70, 0, 0), win(1, 2, 50, 0, 0)}, bucket20, 0},
		{"bucket, across a gap, past", []keyCount{win(1, 0, 70, 0, 0), win(1, 2, 51, 0, 0)}, bucket20, 1},
		// Minute 1 holds seconds 60–119.
		{"window, at the limit", []keyCount{win(1, 60, 3, 9, 0), win(1, 119, 2, 0, 0)}, window5, 0},
		{"window, past", []keyCount{win(1, 60, 3, 0, 0), win(1, 61, 3, 0, 1)}, window5, 1},
		{"window, late in its last second", []keyCount{win(1, 60, 3, 0, 0), win(1, 119, 3, 0, 1)}, window5, 0},
		{"window, two windows", []keyCount{win(1, 60, 5, 0, 0), win(1, 120, 6, 0, 0)}, window5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := overage(tt.windows, tt.limit); got != tt.want {
				t.Errorf("overage = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestUnderLimit(t *testing.T) {
	tests := []struct {
		name    string
		windows []keyCount
		limits  []judgedLimit
		d       int64
		want    bool
	}{
		{"bucket, r per second", []keyCount{win(1, 0, 20, 0, 0), win(1, 1, 20, 0, 0)}, []judgedLimit{bucket20}, 0, true},
		{"bucket, over r", []keyCount{win(1, 0, 21, 0, 0)}, []judgedLimit{bucket20}, 0, false},
		// A bucket of 1000/s without burst: at most C/2 a second.
		{"bucket without burst, half", []keyCount{win(1, 0, 500, 0, 0)}, []judgedLimit{{requests: 1000, period: time.Second}}, 0, true},
		{"bucket without burst, more", []keyCount{win(1, 0, 501, 0, 0)}, []judgedLimit{{requests: 1000, period: time.Second}}, 0, false},
		// A call of 1 s lowers (C − r·δ)/2 to 20: still under.
		{"bucket, slow calls", []keyCount{win(1, 0, 20, 0, 0)}, []judgedLimit{bucket20}, sec(1), true},
		{"bucket, slower calls", []keyCount{win(1, 0, 20, 0, 0)}, []judgedLimit{bucket20}, sec(2), false},
		{"both, the window full", []keyCount{win(1, 60, 5, 0, 0)}, []judgedLimit{window5, bucket20}, 0, true},
		{"both, the window over", []keyCount{win(1, 60, 5, 1, 0)}, []judgedLimit{window5, bucket20}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := underLimit(tt.windows, tt.limits, tt.d); got != tt.want {
				t.Errorf("underLimit = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	counts := loadgen.MergeKeyCounts(
		[]keyCount{win(1, 0, 10, 0, 0), win(2, 0, 10, 2, 0), win(3, 0, 60, 40, 0)},
		[]keyCount{win(1, 0, 5, 1, 0), win(3, 0, 21, 0, 0)},
	)
	// Client 7 sends 60 a second for 10 s, evenly: strict admits the 60
	// of its bucket and 20 a second.
	var hot []keyCount
	for s := range int64(10) {
		hot = append(hot, keyCount{Key: 7, Start: sec(s), OK: 26, OverLimit: 34, First: sec(s), Last: sec(s) + 59*1_000_000/60})
	}
	got := judge(counts, []judgedLimit{bucket20}, time.Millisecond)
	got.add(judge(hot, []judgedLimit{bucket20}, time.Millisecond))
	for _, windows := range byKey(hot) {
		got.addSaturated(capacity(windows, []judgedLimit{bucket20}))
	}
	want := accuracy{
		// Key 1 (16 sent, 1 rejected) and key 2 (12, 2 rejected) are
		// under the limit; key 3 admitted 81 in one second.
		Decisions: 16 + 12 + 121 + 600, OverageHits: 1, OverageKeys: 1,
		UnderLimitHits: 28, FalseRejections: 3, FalseShare: 3.0 / 28,
		Saturated:   []clientCapacity{{Key: 7, Demand: 600, Admitted: 260, StrictAdmits: 259, Share: 260.0 / 259}},
		CapacityMin: 260.0 / 259,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("judge =\n%+v\nwant\n%+v", got, want)
	}
	worst := worstAccuracy([]accuracy{want, {OverageHits: 3, OverageKeys: 2, FalseShare: 0.5, FalseRejections: 1, UnderLimitHits: 2,
		Saturated: []clientCapacity{{Key: 7, Share: 0.5}}, CapacityMin: 0.5}})
	if worst.OverageHits != 3 || worst.FalseShare != 0.5 || worst.CapacityMin != 0.5 || worst.Decisions != want.Decisions {
		t.Errorf("worstAccuracy = %+v", worst)
	}
}

// TestCapacity replays a client's demand through both limits of the API
// mix: a window of 5 a minute binds a client that the bucket would let
// through.
func TestCapacity(t *testing.T) {
	windows := []keyCount{
		{Key: 3, Start: sec(60), OK: 4, OverLimit: 6, First: sec(60), Last: sec(60) + 900_000},
		{Key: 3, Start: sec(61), OK: 1, OverLimit: 9, First: sec(61), Last: sec(61) + 900_000},
		{Key: 3, Start: sec(120), OK: 5, OverLimit: 0, First: sec(120), Last: sec(120) + 900_000},
	}
	got := capacity(windows, []judgedLimit{window5, bucket20})
	want := clientCapacity{Key: 3, Demand: 25, Admitted: 10, StrictAdmits: 10, Share: 1}
	if got != want {
		t.Errorf("capacity = %+v, want %+v", got, want)
	}
}
