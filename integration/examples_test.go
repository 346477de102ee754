package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// exampleStep sends one request ok times, each of which must be OK, and then
// once more if over is set, which must be OVER_LIMIT. The clock is set to
// noon plus at before the step.
type exampleStep struct {
	at    time.Duration
	descs string // descriptors separated by ";", entries by ","
	ok    int
	over  bool
}

// noon is 2026-01-01T12:00:00Z: the start of a minute, a 5-minute window and
// a clock hour, so the window statements of the examples line up.
var noon = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// TestExamplesBehaveAsDocumented checks, for every file of config-examples/,
// the behaviour its comments state.
func TestExamplesBehaveAsDocumented(t *testing.T) {
	layered := []exampleStep{{0, "client=layered", 10, true}}
	for s := 1; s < 100; s++ { // 1000 a day: 10 more every second until then
		layered = append(layered, exampleStep{time.Duration(s) * time.Second, "client=layered", 10, false})
	}
	layered = append(layered, exampleStep{100 * time.Second, "client=layered", 0, true})

	tenantFill := []exampleStep{}
	for u := range 20 { // twenty users of t2 take 50 each: t2's 1000 are gone
		tenantFill = append(tenantFill, exampleStep{0, fmt.Sprintf("tenant=t2;tenant=t2,user=u%d", u), 50, false})
	}
	tenantFill = append(tenantFill, exampleStep{0, "tenant=t2;tenant=t2,user=late", 0, true})

	tests := map[string][]exampleStep{
		"access": {
			{0, "api_key=sk_internal_leaked", 0, true},
			{0, "api_key=sk_internal_build", 10000, false},
			{0, "api_key=sk_revoked_2024", 0, true},
			{0, "api_key=k_revoked_2026_002", 0, true},
			{0, "api_key=k1", 60, true},
			{time.Second, "api_key=k1", 1, true},
			{0, "remote_address=10.1.2.3", 1000, false},
			{0, "remote_address=192.0.2.7", 0, true},
			{0, "remote_address=198.51.100.1", 20, true},
			{3 * time.Second, "remote_address=198.51.100.1", 1, true},
		},
		"algorithms": {
			{0, "client=bursty", 30, true},
			{100 * time.Millisecond, "client=bursty", 1, true},
			{3100 * time.Millisecond, "client=bursty", 30, true},
			{59 * time.Second, "client=windowed", 100, true},
			{60 * time.Second, "client=windowed", 100, true},
			{0, "client=smooth", 100, true},
			{90 * time.Second, "client=smooth", 50, true},
			{0, "client=exact", 100, true},
			{59 * time.Second, "client=exact", 0, true},
			{60*time.Second + time.Millisecond, "client=exact", 100, true},
			{0, "client=report", 5, true},
			{299 * time.Second, "client=report", 0, true},
			{300 * time.Second, "client=report", 5, true},
		},
		"algorithms/layered": layered,
		"endpoints": {
			{0, "api_key=k1,endpoint=/search", 30, true},
			{0, "api_key=k2,endpoint=/search", 30, true},
			{0, "api_key=k1,endpoint=/users", 100, true},
			{0, "api_key=k1,endpoint=/health", 1000, false},
			{0, "api_key=k1,endpoint=/search/advanced", 1000, false},
			{60*time.Second + time.Millisecond, "api_key=k1,endpoint=/search", 30, true},
		},
		"legacy": {
			{0, "source_cluster=proxy,destination_cluster=bar", 100, true},
			{0, "source_cluster=proxy,destination_cluster=baz", 1000, false},
			{0, "path=/api/a", 50, true},
			{0, "path=/api/b", 50, true},
			{0, "path=/files/a", 10, false},
			{0, "path=/files/b", 10, true},
			{0, "path=/files/c", 0, true},
			{0, "path=/api/x;plan=bulk", 500, true},
			{0, "path=/api/status", 1000, true},
			{0, "path=/healthz", 5000, false},
			{0, "user_agent=curl", 100, false},
			{0, "region=eu-west-1-prod", 5, true},
			{0, "region=eu-central-1-prod", 5, true},
		},
		"tenants": {
			{0, "tenant=t1;tenant=t1,user=u1", 50, true},
			{0, "tenant=acme;tenant=acme,user=u1", 200, true},
		},
		"tenants/shared": tenantFill,
		"tiers": {
			{0, "tier=free,api_key=k1", 100, true},
			{600 * time.Millisecond, "tier=free,api_key=k1", 1, true},
			{0, "tier=free,api_key=k2", 100, true},
			{0, "tier=pro,api_key=k1", 1000, true},
			{60 * time.Millisecond, "tier=pro,api_key=k1", 1, true},
			{0, "tier=enterprise,api_key=k1", 10000, true},
			{6 * time.Millisecond, "tier=enterprise,api_key=k1", 1, true},
			{0, "tier=trial,api_key=k1", 1000, false},
		},
	}
	tree, err := descriptor.Load("../config-examples", descriptor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, steps := range tests {
		t.Run(name, func(t *testing.T) {
			domain, _, _ := strings.Cut(name, "/")
			clock := storetest.NewClock(noon)
			lim, err := limiter.New(limiter.Options{
				Store: memory.New(memory.Options{Now: clock.Now}),
				Tree:  func() *descriptor.Tree { return tree },
				Now:   clock.Now,
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range steps {
				clock.Set(noon.Add(st.at))
				req := exampleRequest(domain, st.descs)
				for n := range st.ok {
					if code := check(t, lim, req); code != limiter.OK {
						t.Fatalf("step %d (%s at +%s): request %d is %s, want %d OK", i, st.descs, st.at, n+1, code, st.ok)
					}
				}
				if st.over {
					if code := check(t, lim, req); code != limiter.OverLimit {
						t.Fatalf("step %d (%s at +%s): request %d is %s, want OVER_LIMIT", i, st.descs, st.at, st.ok+1, code)
					}
				}
			}
		})
	}
}

func TestExampleUnlimitedAndUnmatched(t *testing.T) {
	tree, err := descriptor.Load("../config-examples", descriptor.Options{DefaultAlgorithm: algorithm.FixedWindow})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(limiter.Options{Store: memory.New(memory.Options{}), Tree: func() *descriptor.Tree { return tree }})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := lim.Check(context.Background(), exampleRequest("legacy", "path=/healthz;path=/nowhere;source_cluster=proxy"))
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range resp.Statuses {
		if st.Code != limiter.OK {
			t.Errorf("status %d: %s, want OK", i, st.Code)
		}
	}
	if st := resp.Statuses[0]; st.Remaining != limiter.Unlimited || st.Limit != nil {
		t.Errorf("unlimited /healthz: remaining %d, limit %v; want 4294967295 and no limit", st.Remaining, st.Limit)
	}
	for i := 1; i < 3; i++ {
		if st := resp.Statuses[i]; st.Limit != nil {
			t.Errorf("status %d matches no rule but reports limit %v", i, st.Limit)
		}
	}
}

func exampleRequest(domain, descs string) *limiter.Request {
	req := &limiter.Request{Domain: domain}
	for d := range strings.SplitSeq(descs, ";") {
		var entries []descriptor.Entry
		for kv := range strings.SplitSeq(d, ",") {
			k, v, _ := strings.Cut(kv, "=")
			entries = append(entries, descriptor.Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, limiter.Descriptor{Entries: entries})
	}
	return req
}

func check(t *testing.T, lim *limiter.Limiter, req *limiter.Request) limiter.Code {
	t.Helper()
	resp, err := lim.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Code
}

func TestExampleFailureModes(t *testing.T) {
	tree, err := descriptor.Load("../config-examples", descriptor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(limiter.Options{Store: storetest.Failing{Err: store.ErrUnavailable}, Tree: func() *descriptor.Tree { return tree }})
	if err != nil {
		t.Fatal(err)
	}
	for descs, want := range map[string]limiter.Code{
		"tenant=acme;tenant=acme,user=u1": limiter.OK,        // the domain's default: open
		"tenant=t1;tenant=t1,user=u1":     limiter.OverLimit, // the rule's own: closed
	} {
		resp, err := lim.Check(context.Background(), exampleRequest("tenants", descs))
		if err != nil {
			t.Fatal(err)
		}
		degraded := false
		for _, h := range resp.Headers {
			degraded = degraded || (h.Key == limiter.HeaderPolicy && h.Value == limiter.PolicyDegraded)
		}
		if resp.Code != want || !degraded {
			t.Errorf("%s with the store down: %s (degraded %v), want %s, degraded", descs, resp.Code, degraded, want)
		}
	}
}
