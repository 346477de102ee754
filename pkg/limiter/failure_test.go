package limiter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

const failureYAML = `
domain: api
descriptors:
  - key: open
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: closed
    failure_mode: closed
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: local
    failure_mode: local
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: tiny
    failure_mode: local
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shadow
    failure_mode: closed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 4}
---
domain: strict
defaults: {failure_mode: closed}
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: relaxed
    failure_mode: open
    rate_limit: {unit: minute, requests_per_unit: 4}
`

func TestFailureModes(t *testing.T) {
	unavailable := fmt.Errorf("redis: %w", store.ErrUnavailable)
	const wait = 2500 * time.Millisecond
	open := fmt.Errorf("breaker: %w", retryAfterError(wait))
	limitOf := func(f *fixture, domain, key string) *descriptor.Limit {
		return &f.lim.tree().Domain(domain).Match(entries(key + "=v")).Limits[0]
	}
	tests := []struct {
		name     string
		err      error
		req      *Request
		wantCode Code
		want     func(f *fixture) []Status
		headers  []Header
	}{
		{
			name:     "open admits without a limit",
			err:      unavailable,
			req:      req("api", d("open=v")),
			wantCode: OK,
			want:     func(*fixture) []Status { return []Status{{Code: OK}} },
			headers:  []Header{{HeaderPolicy, PolicyDegraded}},
		},
		{
			name:     "closed rejects until the breaker may close",
			err:      open,
			req:      req("api", d("closed=v"), d("open=v")),
			wantCode: OverLimit,
			want: func(f *fixture) []Status {
				return []Status{{Code: OverLimit, Limit: limitOf(f, "api", "closed"), RetryAfter: wait, ResetAfter: wait}, {Code: OK}}
			},
			headers: []Header{
				{HeaderXLimit, "4"},
				{HeaderXRemaining, "0"},
				{HeaderXReset, "1767225613"},
				{HeaderRetryAfter, "3"},
				{HeaderPolicy, PolicyDegraded},
				{HeaderContentType, "application/json"},
			},
		},
		{
			name:     "closed without an open breaker retries after a second",
			err:      unavailable,
			req:      req("api", d("closed=v")),
			wantCode: OverLimit,
			want: func(f *fixture) []Status {
				return []Status{{Code: OverLimit, Limit: limitOf(f, "api", "closed"), RetryAfter: time.Second, ResetAfter: time.Second}}
			},
		},
		{
			name:     "shadow mode wins over closed",
			err:      open,
			req:      req("api", d("shadow=v")),
			wantCode: OK,
			want: func(f *fixture) []Status {
				return []Status{{Code: OK, Limit: limitOf(f, "api", "shadow"), ResetAfter: wait}}
			},
		},
		{
			name:     "domain default",
			err:      open,
			req:      req("strict", d("k=v"), d("relaxed=v")),
			wantCode: OverLimit,
			want: func(f *fixture) []Status {
				return []Status{{Code: OverLimit, Limit: limitOf(f, "strict", "k"), RetryAfter: wait, ResetAfter: wait}, {Code: OK}}
			},
		},
		{
			name: "override without a rule takes the service default",
			err:  open,
			req: &Request{Domain: "api", Descriptors: []Descriptor{{
				Entries:  entries("nomatch=v"),
				Override: &Override{RequestsPerUnit: 10, Unit: descriptor.Second},
			}}},
			wantCode: OverLimit,
			want: func(*fixture) []Status {
				return []Status{{Code: OverLimit, Limit: &descriptor.Limit{Unit: descriptor.Second, UnitMultiplier: 1, RequestsPerUnit: 10, Algorithm: algorithm.TokenBucket}, RetryAfter: wait, ResetAfter: wait}}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, failureYAML, func(o *Options) {
				o.Store = storetest.Failing{Err: tt.err}
				o.DefaultFailureMode = descriptor.FailClosed
			})
			resp := f.check(t, tt.req)
			got := &Response{Code: resp.Code, Statuses: resp.Statuses}
			want := &Response{Code: tt.wantCode, Statuses: tt.want(f)}
			if tt.headers != nil {
				got.Headers, want.Headers = resp.Headers, tt.headers
			}
			assertResponse(t, got, want)
		})
	}
}

func TestFailureModeLocal(t *testing.T) {
	clk := storetest.NewClock(t0)
	f := newFixture(t, failureYAML, func(o *Options) {
		o.Store = storetest.Failing{Err: store.ErrUnavailable}
		o.Fallback = memory.New(memory.Options{Now: clk.Now})
		o.FallbackShare = 3
		o.Now = clk.Now
	})
	// 4 per minute shared by 3 instances: this one admits 1.
	share := &descriptor.Limit{Unit: descriptor.Minute, UnitMultiplier: 1, RequestsPerUnit: 1, Algorithm: algorithm.TokenBucket}
	resp := f.check(t, req("api", d("local=v")))
	assertResponse(t, &Response{Code: resp.Code, Statuses: resp.Statuses}, &Response{
		Code:     OK,
		Statuses: []Status{{Code: OK, Limit: share, Remaining: 0, ResetAfter: time.Minute}},
	})
	resp = f.check(t, req("api", d("local=v")))
	assertResponse(t, &Response{Code: resp.Code, Statuses: resp.Statuses}, &Response{
		Code:     OverLimit,
		Statuses: []Status{{Code: OverLimit, Limit: share, ResetAfter: time.Minute, RetryAfter: time.Minute}},
	})
	if !hasHeader(resp.Headers, HeaderPolicy, PolicyDegraded) {
		t.Errorf("headers %v lack the degraded marker", resp.Headers)
	}
	// A limit smaller than the share still admits one.
	resp = f.check(t, req("api", d("tiny=v")))
	if resp.Code != OK {
		t.Errorf("tiny: code %v, want OK", resp.Code)
	}
	// Other keys count separately.
	if resp := f.check(t, req("api", d("local=w"))); resp.Code != OK {
		t.Errorf("another value: code %v, want OK", resp.Code)
	}
}

func TestFailureModeLocalWithoutFallback(t *testing.T) {
	f := newFixture(t, failureYAML, func(o *Options) { o.Store = storetest.Failing{Err: store.ErrUnavailable} })
	for range 6 {
		if resp := f.check(t, req("api", d("local=v"))); resp.Code != OK || resp.Statuses[0] != (Status{Code: OK, Rule: resp.Statuses[0].Rule}) {
			t.Fatalf("got %+v, want an open answer", resp)
		}
	}
}

// deadlineStore records the deadline of the context of each call.
type deadlineStore struct {
	deadline time.Time
	bounded  bool
}

func (s *deadlineStore) Apply(ctx context.Context, _ []store.Hit, _ []algorithm.Verdict) error {
	s.deadline, s.bounded = ctx.Deadline()
	return nil
}

func TestStoreDeadline(t *testing.T) {
	far := time.Now().Add(time.Hour)
	tests := []struct {
		name     string
		timeout  time.Duration
		caller   time.Time // zero: no deadline
		want     time.Duration
		fromNow  bool // want is relative to now rather than to caller
		unbounds bool
	}{
		{name: "caller's deadline less the margin", timeout: time.Hour, caller: far, want: -5 * time.Millisecond},
		{name: "the timeout when earlier", timeout: 20 * time.Millisecond, caller: far, want: 20 * time.Millisecond, fromNow: true},
		{name: "the timeout without a caller deadline", timeout: 20 * time.Millisecond, want: 20 * time.Millisecond, fromNow: true},
		{name: "none", unbounds: true},
		{name: "none but the caller's", caller: far, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &deadlineStore{}
			f := newFixture(t, failureYAML, func(o *Options) {
				o.Store = st
				o.StoreTimeout = tt.timeout
				o.DeadlineMargin = 5 * time.Millisecond
			})
			ctx := context.Background()
			if !tt.caller.IsZero() {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, tt.caller)
				defer cancel()
			}
			before := time.Now()
			if _, err := f.lim.Check(ctx, req("api", d("open=v"))); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			switch {
			case tt.unbounds:
				if st.bounded {
					t.Errorf("store call had deadline %v, want none", st.deadline)
				}
			case tt.fromNow:
				if st.deadline.Before(before.Add(tt.want)) || st.deadline.After(after.Add(tt.want)) {
					t.Errorf("deadline %v after the call's start, want %v", st.deadline.Sub(before), tt.want)
				}
			default:
				if !st.deadline.Equal(tt.caller.Add(tt.want)) {
					t.Errorf("deadline %v from the caller's, want %v", st.deadline.Sub(tt.caller), tt.want)
				}
			}
		})
	}
}

func hasHeader(hs []Header, key, value string) bool {
	for _, h := range hs {
		if h.Key == key && h.Value == value {
			return true
		}
	}
	return false
}

func TestFailureModeLocalKeepsLabelsBounded(t *testing.T) {
	f := newFixture(t, failureYAML, func(o *Options) {
		o.Store = storetest.Failing{Err: store.ErrUnavailable}
		o.Fallback = memory.New(memory.Options{})
		o.FallbackShare = 2
	})
	for i := range 100 {
		f.check(t, req("api", d(fmt.Sprintf("local=v%d", i))))
	}
	if n := f.lim.labelsFor(f.lim.tree()).n.Load(); n != 1 {
		t.Errorf("%d metric label sets after 100 local answers of one rule, want 1", n)
	}
}

func TestFailureModeLocalChargesNothingWhenRejected(t *testing.T) {
	f := newFixture(t, failureYAML, func(o *Options) {
		o.Store = storetest.Failing{Err: store.ErrUnavailable}
		o.Fallback = memory.New(memory.Options{Now: func() time.Time { return t0 }})
	})
	// closed rejects the request: local=v is checked, not charged.
	if resp := f.check(t, req("api", d("closed=v"), d("local=v"))); resp.Code != OverLimit {
		t.Fatalf("closed and local: %v, want OVER_LIMIT", resp.Code)
	}
	resp := f.check(t, req("api", d("local=v")))
	if got := resp.Statuses[0].Remaining; got != 3 {
		t.Errorf("local=v after a rejected request: remaining %d, want 3 (4 less this one)", got)
	}
}

// TestFailureModeLocalChargesAlwaysWhenRejected checks that a request
// rejected by a failing-closed descriptor still charges the local hits of
// a descriptor marked tollgate.charge=always.
func TestFailureModeLocalChargesAlwaysWhenRejected(t *testing.T) {
	f := newFixture(t, failureYAML, func(o *Options) {
		o.Store = storetest.Failing{Err: store.ErrUnavailable}
		o.Fallback = memory.New(memory.Options{Now: func() time.Time { return t0 }})
	})
	marked := Descriptor{Entries: entries("local=v", ChargeKey+"="+ChargeAlwaysValue), Hits: 2, HasHits: true}
	if resp := f.check(t, &Request{Domain: "api", Descriptors: []Descriptor{{Entries: entries("closed=v")}, marked}}); resp.Code != OverLimit {
		t.Fatalf("closed and marked local: %v, want OVER_LIMIT", resp.Code)
	}
	resp := f.check(t, req("api", d("local=v")))
	if got := resp.Statuses[0].Remaining; got != 1 {
		t.Errorf("local=v after a rejected request: remaining %d, want 1 (4 less 2 charged always, less this one)", got)
	}
}

// countingStore counts its calls and answers every hit as admitted.
type countingStore struct{ calls int }

func (s *countingStore) Apply(_ context.Context, hits []store.Hit, v []algorithm.Verdict) error {
	s.calls++
	for i := range v {
		v[i] = algorithm.Verdict{Allowed: true}
	}
	return nil
}

func TestNoTimeLeftSkipsTheStore(t *testing.T) {
	st := &countingStore{}
	f := newFixture(t, failureYAML, func(o *Options) {
		o.Store = st
		o.StoreTimeout, o.DeadlineMargin = time.Second, time.Hour
	})
	// A minute left, less than the margin: no store call, a failure-mode
	// answer. (Times this long keep the test from depending on the
	// machine's speed.)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := f.lim.Check(ctx, req("api", d("closed=v")))
	if err != nil {
		t.Fatal(err)
	}
	if st.calls != 0 || resp.Code != OverLimit || !hasHeader(resp.Headers, HeaderPolicy, PolicyDegraded) {
		t.Errorf("with a minute left: %d store calls, %v; want none and a degraded OVER_LIMIT", st.calls, resp.Code)
	}
	// With time left, the store decides.
	if resp := f.check(t, req("api", d("closed=v"))); st.calls != 1 || resp.Code != OK {
		t.Errorf("with time left: %d store calls, %v; want 1 and OK", st.calls, resp.Code)
	}
}

func TestNewRejectsBadFailureOptions(t *testing.T) {
	tree := func() *descriptor.Tree { return nil }
	for _, tt := range []struct {
		opts Options
		want string
	}{
		{Options{StoreTimeout: -1}, "limiter: negative store timeout -1ns"},
		{Options{DeadlineMargin: -1}, "limiter: negative deadline margin -1ns"},
		{Options{FallbackShare: -1}, "limiter: negative fallback share -1"},
		{Options{DefaultFailureMode: 7}, "limiter: unknown failure mode 7"},
	} {
		tt.opts.Store, tt.opts.Tree = storetest.Failing{}, tree
		if _, err := New(tt.opts); err == nil || err.Error() != tt.want {
			t.Errorf("New(%+v) = %v, want %q", tt.opts, err, tt.want)
		}
	}
}

// retryAfterError is a store error that says when to retry, as the circuit
// breaker's refusal does.
type retryAfterError time.Duration

var _ store.RetryAfterError = retryAfterError(0)

func (e retryAfterError) Error() string {
	return fmt.Sprintf("%v: retry in %v", store.ErrUnavailable, time.Duration(e))
}

func (e retryAfterError) Unwrap() error { return store.ErrUnavailable }

func (e retryAfterError) RetryAfter() time.Duration { return time.Duration(e) }
