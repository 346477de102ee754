// Package algorithm holds tollgate's four rate-limit algorithms as pure
// functions of (state, limit, now, cost), the leases reserved from them
// (lease.go), and penalties, the escalating cooldowns of clients that
// ignore Retry-After (penalty.go). Stores keep the state; the Redis store
// mirrors each function in Lua and must give identical verdicts on the
// vectors in package algorithmtest, which package storetest runs against
// every store.
//
// Time is an int64 count of microseconds since the Unix epoch. Microseconds
// keep every value below 2^53, so Lua's doubles represent them exactly.
package algorithm

import (
	"fmt"
	"strings"
	"time"
)

// Kind names an algorithm.
type Kind uint8

// The algorithms. The zero Kind is not valid; configuration resolves an
// unset algorithm to the configured default before a Limit is built.
const (
	TokenBucket Kind = iota + 1
	FixedWindow
	SlidingWindowCounter
	SlidingWindowLog
)

var kindNames = [...]string{
	TokenBucket:          "token_bucket",
	FixedWindow:          "fixed_window",
	SlidingWindowCounter: "sliding_window_counter",
	SlidingWindowLog:     "sliding_window_log",
}

// String returns the configuration name of k, such as "token_bucket".
func (k Kind) String() string {
	if k == 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("algorithm(%d)", k)
	}
	return kindNames[k]
}

// ParseKind returns the Kind named s, ignoring case.
func ParseKind(s string) (Kind, error) {
	for k, name := range kindNames {
		if name != "" && strings.EqualFold(s, name) {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want token_bucket, fixed_window, sliding_window_counter or sliding_window_log)", s)
}

// Charge says when a hit's cost is added to its counter.
type Charge uint8

// The charges. ChargeAdmitted, the zero Charge, adds a cost only when the
// hit is admitted: a rejected hit takes nothing. ChargeAlways adds it
// whatever the verdict, as usage reported after a response must be, so a
// counter may stand past its limit.
const (
	ChargeAdmitted Charge = iota
	ChargeAlways
)

var chargeNames = [...]string{ChargeAdmitted: "admitted", ChargeAlways: "always"}

// String returns the configuration name of c, such as "always".
func (c Charge) String() string {
	if int(c) >= len(chargeNames) {
		return fmt.Sprintf("charge(%d)", c)
	}
	return chargeNames[c]
}

// ParseCharge returns the Charge named s, ignoring case.
func ParseCharge(s string) (Charge, error) {
	for c, name := range chargeNames {
		if strings.EqualFold(s, name) {
			return Charge(c), nil
		}
	}
	return 0, fmt.Errorf("unknown charge %q (want admitted or always)", s)
}

// Limit is what one rule allows: Requests hits per Period, plus Burst extra
// capacity for a token bucket, and when a cost is charged. Kind and Period
// identify a counter; Requests, Burst and Charge may change and keep it.
type Limit struct {
	Kind     Kind
	Requests int64 // hits admitted per period
	Burst    int64 // extra token-bucket capacity; 0 for other algorithms
	Period   int64 // microseconds
	Charge   Charge
}

// Micros converts a time to the microsecond timestamps the algorithms use.
func Micros(t time.Time) int64 { return t.UnixMicro() }

// Verdict is the outcome of one hit.
type Verdict struct {
	// Allowed reports whether the hit was admitted. A rejected hit changes
	// no state.
	Allowed bool
	// Limit is the capacity reported to clients (Requests, plus Burst for a
	// token bucket).
	Limit int64
	// Remaining is how many more unit-cost hits would be admitted right now,
	// after this hit.
	Remaining int64
	// ResetAfter is how long until the counter is back to full capacity if
	// nothing else is counted: until a token bucket is full, or until every
	// counted hit of a window algorithm has left its window. It is zero for
	// a counter that is already full.
	ResetAfter time.Duration
	// RetryAfter is zero for an admitted hit; for a rejected one, how long
	// until the same hit would be admitted if nothing else happened. A hit
	// that can never be admitted (its cost exceeds the capacity, or Requests
	// is 0) gets one Period, so clients back off instead of retrying at once.
	RetryAfter time.Duration
	// Penalized reports a hit rejected by a Penalty's cooldown (see
	// ApplyPenalty): RetryAfter is the cooldown left. It is never set on
	// an admitted hit.
	Penalized bool
}
