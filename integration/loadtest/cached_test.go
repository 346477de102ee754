package main

import (
	"fmt"
	"math"
	"testing"
)

func TestLocalCeiling(t *testing.T) {
	tests := []struct {
		name string
		rps  float64
		args []string
		want float64
	}{
		// Each key at 2000/s: half its hits are admissions of an
		// empty bucket.
		{"saturated", 4000, []string{"--keys", "2"}, 0.5},
		// Hits 1/9 s apart on two keys: a key's next hit comes k/9 s
		// later with probability 2^-k, after its 500 ms lease from k = 5.
		{"cold", 9, []string{"--keys", "2"}, 1 - 1.0/16},
		{"no keys", 10, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := localCeiling(tt.rps, tt.args, 1000); math.Abs(got-tt.want) > 0.02 {
				t.Errorf("localCeiling = %.3f, want %.3f", got, tt.want)
			}
		})
	}
}

func TestParseScriptCalls(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_fcall:calls=120,usec=900,usec_per_call=7.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=5,usec=40,usec_per_call=8.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=9,usec=90,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_fcall_ro:calls=2,usec=10,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n"
	if got := parseScriptCalls(info); got != 127 {
		t.Errorf("parseScriptCalls = %d, want 127", got)
	}
}

func TestParseLatencies(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"0", "[0s]", ""},
		{"0,0.5ms,2ms", "[0s 500µs 2ms]", ""},
		{"2ms", "[2ms]", ""},
		{"0,0s", "", "-redis-latency: 0s given twice"},
		{"fast", "", `-redis-latency: "fast" is not a duration of 0 or more`},
		{"-1ms", "", `-redis-latency: "-1ms" is not a duration of 0 or more`},
	}
	for _, tt := range tests {
		got, err := parseLatencies(tt.in)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("parseLatencies(%q) error = %v, want %s", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != tt.want {
			t.Errorf("parseLatencies(%q) = %v, %v, want %s", tt.in, got, err, tt.want)
		}
	}
}
