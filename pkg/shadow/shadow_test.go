package shadow_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"testing/fstest"
	"testing/synctest"
	"time"

	"github.com/tollgatehq/tollgate/internal/metrictest"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/shadow"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/top"
)

// liveRules give each client 5 calls a minute and deny the client
// "blocked"; shadowRules lower the limit to 2 and deny no one. Each set
// has a domain the other lacks.
const (
	liveRules = `domain: api
descriptors:
  - key: client
    value: blocked
    action: deny
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window, name: per_client}
`
	liveOnlyDomain = `domain: old
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	shadowRules = `domain: api
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window, name: per_client}
`
	shadowNewDomain = `domain: new
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
`
)

// load loads a tree of one file for each of files.
func load(t *testing.T, files ...string) *descriptor.Tree {
	t.Helper()
	fsys := fstest.MapFS{}
	for i, f := range files {
		fsys[fmt.Sprintf("rules%d.yaml", i)] = &fstest.MapFile{Data: []byte(f)}
	}
	tree, err := descriptor.LoadFS(fsys, descriptor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// live is a live engine whose decided calls the shadow set hears, on a
// clock the test moves.
type live struct {
	lim *limiter.Limiter
	now time.Time
}

// newLive returns a live engine whose clock starts at 17:00; its engine
// is built by serve.
func newLive() *live {
	return &live{now: time.Date(2026, 11, 28, 17, 0, 0, 0, time.UTC)}
}

// serve builds l's engine, which tells set of every decided call.
func (l *live) serve(t *testing.T, set *shadow.Set) *live {
	t.Helper()
	tree := load(t, liveRules, liveOnlyDomain)
	now := func() time.Time { return l.now }
	var err error
	l.lim, err = limiter.New(limiter.Options{
		Store: memory.New(memory.Options{Now: now}), Tree: func() *descriptor.Tree { return tree }, Now: now, Recorder: set,
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// check decides one call of client in domain at the live clock and
// returns its overall code. The request's entries are overwritten once
// it is answered, as the gRPC adapter reuses them.
func (l *live) check(t *testing.T, domain, client string) string {
	t.Helper()
	entries := []descriptor.Entry{{Key: "client", Value: client}}
	resp, err := l.lim.Check(context.Background(), &limiter.Request{Domain: domain, Descriptors: []limiter.Descriptor{{Entries: entries}}})
	if err != nil {
		t.Fatal(err)
	}
	entries[0] = descriptor.Entry{Key: "reused", Value: "reused"}
	return resp.Code.String()
}

func TestCountsWhatTheShadowRulesWouldAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp, series := metrictest.NewSeries(t)
		shadowTree := load(t, shadowRules, shadowNewDomain)
		l := newLive()
		rec, err := top.New(top.Options{Now: func() time.Time { return l.now }})
		if err != nil {
			t.Fatal(err)
		}
		set, err := shadow.New(shadow.Options{Tree: func() *descriptor.Tree { return shadowTree }, Top: rec, MeterProvider: mp})
		if err != nil {
			t.Fatal(err)
		}
		l.serve(t, set)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- set.Run(ctx) }()

		// Three calls of a within one minute: all admitted live, the
		// third rejected by the shadow limit of 2. A fourth a minute
		// later, in the next window, would pass both: the shadow set
		// judges each call at the live decision's instant.
		var got []string
		for _, step := range []time.Duration{0, time.Second, time.Second, time.Minute} {
			l.now = l.now.Add(step)
			got = append(got, l.check(t, "api", "a"))
		}
		got = append(got, l.check(t, "api", "blocked")) // rejected live, admitted in the shadow
		got = append(got, l.check(t, "new", "b"))       // unknown live, limited in the shadow
		got = append(got, l.check(t, "old", "d"))       // limited live, unknown in the shadow
		got = append(got, l.check(t, "none", "c"))      // unknown to both
		if want := []string{"OK", "OK", "OK", "OK", "OVER_LIMIT", "OK", "OK", "OK"}; !slices.Equal(got, want) {
			t.Fatalf("live answers %v, want %v: the shadow set changed them", got, want)
		}
		synctest.Wait() // the worker has decided everything queued

		wantDecisions := map[string]int64{
			`domain="api",limit="per_client",result="ok",rule="client"`:         4,
			`domain="api",limit="per_client",result="over_limit",rule="client"`: 1,
			`domain="new",limit="",result="ok",rule="client"`:                   1,
			`domain="old",limit="",result="unmatched",rule=""`:                  1,
			`domain="(unknown)",limit="",result="unmatched",rule=""`:            1,
		}
		if got := series("tollgate_shadow_decisions"); !maps.Equal(got, wantDecisions) {
			t.Errorf("tollgate_shadow_decisions = %v, want %v", got, wantDecisions)
		}
		wantDifferences := map[string]int64{
			`change="newly_rejected",domain="api"`: 1,
			`change="newly_admitted",domain="api"`: 1,
		}
		if got := series("tollgate_shadow_differences"); !maps.Equal(got, wantDifferences) {
			t.Errorf("tollgate_shadow_differences = %v, want %v", got, wantDifferences)
		}
		if st := set.Status(); st != (shadow.Status{Decided: 8}) {
			t.Errorf("Status() = %+v, want 8 decided and none dropped", st)
		}

		ans, err := rec.Top(t.Context(), top.Query{Domain: "api", By: top.ByRejected, Window: top.FiveMinutes})
		if err != nil {
			t.Fatal(err)
		}
		if len(ans.Entries) != 1 || ans.Entries[0].Descriptor[0] != (descriptor.Entry{Key: "client", Value: "a"}) ||
			ans.Entries[0].Requests != 4 || ans.Entries[0].Rejected != 1 {
			t.Errorf("the shadow set's top clients = %+v, want a with 4 requests, 1 rejected", ans.Entries)
		}

		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}

func TestFullQueueDropsAndCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp, sum := metrictest.New(t)
		tree := load(t, shadowRules)
		release := make(chan struct{})
		blocked := true
		set, err := shadow.New(shadow.Options{Queue: 1, MeterProvider: mp, Tree: func() *descriptor.Tree {
			if blocked {
				<-release // the worker is stuck in its first decision
			}
			return tree
		}})
		if err != nil {
			t.Fatal(err)
		}
		l := newLive().serve(t, set)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- set.Run(ctx) }()

		l.check(t, "api", "a")
		synctest.Wait() // the worker holds the first call, blocked
		for range 9 {
			l.check(t, "api", "a") // answered at once though the worker is blocked
		}
		if st := set.Status(); st != (shadow.Status{Dropped: 8}) {
			t.Errorf("Status() = %+v, want 8 dropped: one call is held, one queued", st)
		}
		if n := sum("tollgate_shadow_dropped"); n != 8 {
			t.Errorf("tollgate_shadow_dropped = %d, want 8", n)
		}

		blocked = false
		close(release)
		synctest.Wait()
		if st := set.Status(); st != (shadow.Status{Decided: 2, Dropped: 8}) {
			t.Errorf("Status() = %+v after the release, want the held and the queued call decided", st)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}

// TestNoRulesDecidesNothing checks a shadow set whose rules have not
// loaded: the calls are taken and not counted.
func TestNoRulesDecidesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp, sum := metrictest.New(t)
		set, err := shadow.New(shadow.Options{Tree: func() *descriptor.Tree { return nil }, MeterProvider: mp})
		if err != nil {
			t.Fatal(err)
		}
		l := newLive().serve(t, set)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() { _ = set.Run(ctx) }()
		l.check(t, "api", "a")
		synctest.Wait()
		if st, n := set.Status(), sum("tollgate_shadow_decisions"); st != (shadow.Status{}) || n != 0 {
			t.Errorf("Status() = %+v and %d decisions without shadow rules, want none", st, n)
		}
	})
}
