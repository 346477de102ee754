package app_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
	"github.com/tollgatehq/tollgate/pkg/top"
)

// topRules limit each API key to 100 an hour: a window that never turns
// during a test.
const topRules = "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: fixed_window, name: per_key}\n"

// topTraffic is the test's traffic: five heavy clients sending 600, 500,
// 400, 300 and 200 requests, in calls of 50 hits, of which all but the
// first 100 are rejected; and 3000 light clients of one request each.
type topTraffic struct {
	heavy []string
	// requests and rejected are the true counts of every client.
	requests, rejected map[string]uint64
	// n and nRejected are the totals.
	n, nRejected uint64
}

const (
	heavyCall    = 50
	lightClients = 3000
	lightPerCall = 60
)

// send sends the traffic, every call to one of clients in turn.
func (tt *topTraffic) send(t *testing.T, clients ...*rlsclient.Client) {
	t.Helper()
	tt.requests, tt.rejected = map[string]uint64{}, map[string]uint64{}
	ctx := context.Background()
	call := 0
	query := func(r rlsclient.Request) *rlsv3.RateLimitResponse {
		t.Helper()
		c := clients[call%len(clients)]
		call++
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := c.Query(cctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	light := 0
	for i := range 5 {
		name := fmt.Sprintf("heavy-%d", i)
		tt.heavy = append(tt.heavy, name)
		for range (600 - 100*i) / heavyCall {
			resp := query(rlsclient.Request{Domain: "api", Hits: heavyCall, Descriptors: [][]descriptor.Entry{{{Key: "api_key", Value: name}}}})
			tt.requests[name] += heavyCall
			tt.n += heavyCall
			if resp.Statuses[0].Code == rlsv3.RateLimitResponse_OVER_LIMIT {
				tt.rejected[name] += heavyCall
				tt.nRejected += heavyCall
			}
			// Light clients between the heavy calls.
			for range 10 {
				if light == lightClients {
					break
				}
				r := rlsclient.Request{Domain: "api"}
				for range lightPerCall {
					name := fmt.Sprintf("light-%d", light)
					r.Descriptors = append(r.Descriptors, []descriptor.Entry{{Key: "api_key", Value: name}})
					tt.requests[name]++
					tt.n++
					light++
				}
				query(r)
			}
		}
	}
	if light != lightClients {
		t.Fatalf("sent %d light clients", light)
	}
}

// check checks an answer: the five heavy clients on top in order, every
// count within its error of the truth, every error within N/K.
func (tt *topTraffic) check(t *testing.T, ans *top.Answer, k int) (maxErr uint64) {
	t.Helper()
	var names []string
	for _, e := range ans.Entries {
		v := e.Descriptor[0].Value
		names = append(names, v)
		for _, c := range []struct {
			what           string
			got, err, want uint64
			n              uint64
		}{
			{"requests", e.Requests, e.RequestsError, tt.requests[v], tt.n},
			{"rejected", e.Rejected, e.RejectedError, tt.rejected[v], tt.nRejected},
		} {
			if c.got < c.want || c.got-c.err > c.want {
				t.Errorf("%s: %s %d ± %d, but the fleet sent %d", v, c.what, c.got, c.err, c.want)
			}
			if c.err > c.n/uint64(k) {
				t.Errorf("%s: %s error %d is over N/K = %d/%d", v, c.what, c.err, c.n, k)
			}
			maxErr = max(maxErr, c.err)
		}
	}
	if !slices.Equal(names, tt.heavy) {
		t.Errorf("by %s: the top five are %v, want %v", ans.By, names, tt.heavy)
	}
	return maxErr
}

// TestTopFleet runs two instances on one Redis and sends the traffic to
// both: each names the five heavy clients in order, by requests and by
// rejections, with fleet-wide counts within the bound, merging two
// instances; once one stops, the other answers for itself alone.
func TestTopFleet(t *testing.T) {
	srv := redistest.StartStandalone(t)
	dir := t.TempDir()
	apptest.WriteFile(t, filepath.Join(dir, "api.yaml"), topRules)
	const publish = 200 * time.Millisecond
	useRedis := func(s *app.Settings) {
		s.Store, s.Redis.Addrs, s.Redis.KeyPrefix = "redis", []string{srv.Addr}, "tp"
		s.Redis.Timeout, s.Failure.StoreTimeout = time.Second, 5*time.Second
		s.Top.Publish = publish
	}
	a := apptest.Start(t, dir, apptest.Options{Settings: useRedis})
	b := apptest.Start(t, dir, apptest.Options{Settings: useRedis})
	var traffic topTraffic
	traffic.send(t, dialApp(t, a), dialApp(t, b))
	k := a.Top().Capacity()

	var maxErr uint64
	for _, in := range []*apptest.Running{a, b} {
		for _, by := range []top.By{top.ByRequests, top.ByRejected} {
			var ans *top.Answer
			// Until the other instance has published all it decided.
			polltest.EventuallyEvery(t, 5*time.Second, 50*time.Millisecond, func() bool {
				var err error
				ans, err = in.Top().Top(context.Background(), top.Query{By: by, Limit: 5})
				if err != nil {
					t.Fatal(err)
				}
				return ans.Instances == 2 && !ans.Partial && len(ans.Entries) == 5 && entriesSettled(ans, &traffic)
			}, "the answer does not merge both instances' traffic")
			maxErr = max(maxErr, traffic.check(t, ans, k))
		}
	}
	t.Logf("RESULT top merge of 2 instances: N=%d requests (%d rejected) over %d clients, K=%d, bound N/K=%d; largest error of the top five %d",
		traffic.n, traffic.nRejected, len(traffic.requests), k, traffic.n/uint64(k), maxErr)

	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	polltest.EventuallyEvery(t, 3*publish+time.Second, 20*time.Millisecond, func() bool {
		ans, err := a.Top().Top(context.Background(), top.Query{})
		return err == nil && ans.Instances == 1
	}, "the stopped instance does not drop out of the merge")
}

// entriesSettled reports whether the answer's counts reach the fleet's
// true counts: a count is an upper bound, so one below the truth still
// misses an instance's latest snapshot.
func entriesSettled(ans *top.Answer, tt *topTraffic) bool {
	for _, e := range ans.Entries {
		v := e.Descriptor[0].Value
		if e.Requests < tt.requests[v] || e.Rejected < tt.rejected[v] {
			return false
		}
	}
	return true
}

// TestTopMemory checks that with the memory store an instance answers
// for itself, and that --top-capacity 0 turns the summaries off.
func TestTopMemory(t *testing.T) {
	dir := t.TempDir()
	apptest.WriteFile(t, filepath.Join(dir, "api.yaml"), topRules)
	a := apptest.Start(t, dir, apptest.Options{})
	var traffic topTraffic
	traffic.send(t, dialApp(t, a))
	ans, err := a.Top().Top(context.Background(), top.Query{Limit: 5, Window: top.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Instances != 1 || ans.Partial {
		t.Errorf("answer of %d instances (partial %v)", ans.Instances, ans.Partial)
	}
	traffic.check(t, ans, a.Top().Capacity())
	rules := a.Top().Rules(context.Background(), top.RulesQuery{Domain: "api"})
	if len(rules.Rules) != 1 || rules.Rules[0].Limit != "per_key" || rules.Rules[0].RequestsPerUnit != 100 || rules.Rules[0].Period != time.Hour ||
		!strings.HasPrefix(rules.Rules[0].Hottest[0].Value, "heavy-0") {
		t.Errorf("rules: %+v", rules.Rules)
	}

	off := apptest.Start(t, dir, apptest.Options{Settings: func(s *app.Settings) { s.Top.Capacity = 0 }})
	if off.Top() != nil {
		t.Error("--top-capacity 0 keeps summaries")
	}
}
