package record_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/record"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
)

// exactRules exercise every algorithm, a penalty and a limit charged
// always.
const exactRules = `
domain: api
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 3, name: bucket}
    descriptors:
      - key: op
        value: fixed
        rate_limit: {unit: minute, requests_per_unit: 20, algorithm: fixed_window, name: fixed}
      - key: op
        value: counter
        rate_limit: {unit: minute, requests_per_unit: 15, algorithm: sliding_window_counter, name: counter}
      - key: op
        value: log
        rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 4, algorithm: sliding_window_log, name: log}
      - key: op
        value: penalized
        rate_limit:
          unit: second
          requests_per_unit: 2
          algorithm: fixed_window
          name: penalized
          penalty: {tolerance: 1, cooldown: 5s, max: 1m, forgive_after: 2m}
      - key: op
        value: tokens
        rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: token_bucket, charge: always, name: tokens}
`

func loadRules(t testing.TB, yaml string) *descriptor.Tree {
	t.Helper()
	tree, err := descriptor.LoadFS(fstest.MapFS{"api.yaml": {Data: []byte(yaml)}}, descriptor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// traffic is a recorded run: the live engine's decisions on an injected
// clock, and what they were.
type traffic struct {
	file        []byte
	descriptors int64
	penalized   int64 // descriptors answered by a penalty's cooldown
	overridden  int64 // descriptors rejected by an operator's override
	envoy       int64 // descriptors rejected by Envoy's limit override
}

// run sends calls calls of ten clients to an engine of tree on a memory
// store, over about calls/10 virtual seconds, recording those from the
// recordFrom-th on. With other set, a second engine sharing the store
// decides every other call, unrecorded, as a second instance on one
// Redis would. An operator's override lowers client c1's limits for a
// few minutes in the middle.
func run(t *testing.T, tree *descriptor.Tree, calls, recordFrom int, other bool) traffic {
	t.Helper()
	now := time.Date(2026, 11, 28, 17, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	var out bytes.Buffer
	rec, err := record.New(record.Options{Output: &out, Queue: calls + 16, Now: clock,
		Header: func() record.Header { return record.Header{RulesHash: tree.Hash()} }})
	if err != nil {
		t.Fatal(err)
	}
	var overrides *override.Set
	st := memory.New(memory.Options{Now: clock})
	engine := func(r limiter.Recorder) *limiter.Limiter {
		lim, err := limiter.New(limiter.Options{Store: st, Tree: func() *descriptor.Tree { return tree },
			Overrides: func() *override.Set { return overrides }, Now: clock, Recorder: r})
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	live, second := engine(rec), engine(nil)
	lowered := override.Override{ID: "o1", Domain: "api", Entries: []descriptor.Entry{{Key: "client", Value: "c1"}},
		Limit: &override.Limit{RequestsPerUnit: 1, Unit: "minute"}, ExpiresAt: now.Add(time.Hour), CreatedAt: now}

	rng := rand.New(rand.NewPCG(1, 2))
	ops := []string{"fixed", "counter", "log", "penalized", "tokens"}
	var tr traffic
	for i := range calls {
		now = now.Add(time.Duration(rng.IntN(200_000)) * time.Microsecond)
		switch i {
		case recordFrom:
			if err := rec.Start(record.Span{}); err != nil {
				t.Fatal(err)
			}
		case calls / 3:
			overrides = override.NewSet([]override.Override{lowered})
			rec.Override(record.ChangeCreated, lowered)
		case calls * 2 / 3:
			overrides = nil
			rec.Override(record.ChangeDeleted, lowered)
		}
		client := descriptor.Entry{Key: "client", Value: fmt.Sprintf("c%d", rng.IntN(10))}
		op := ops[rng.IntN(len(ops))]
		req := &limiter.Request{Domain: "api", Hits: uint32(rng.IntN(2))}
		d := limiter.Descriptor{Entries: []descriptor.Entry{client, {Key: "op", Value: op}}}
		switch {
		case op == "tokens" && rng.IntN(2) == 0:
			// A report of usage after the response, charged always.
			d.Entries = append(d.Entries, descriptor.Entry{Key: limiter.ChargeKey, Value: limiter.ChargeAlwaysValue})
			d.Hits, d.HasHits = uint64(rng.IntN(100)), true
		case op == "tokens" && rng.IntN(5) == 0:
			d.Hits, d.HasHits, d.Refund = uint64(rng.IntN(50)), true, true
		case op == "fixed" && rng.IntN(4) == 0:
			d.Override = &limiter.Override{RequestsPerUnit: 2, Unit: descriptor.Minute}
		}
		req.Descriptors = append(req.Descriptors, d, limiter.Descriptor{Entries: []descriptor.Entry{client}})
		lim := live
		if other && i%2 == 1 {
			lim = second
		}
		resp, err := lim.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if i < recordFrom || lim != live {
			continue
		}
		tr.descriptors += int64(len(req.Descriptors))
		for j, s := range resp.Statuses {
			switch {
			case s.Penalized:
				tr.penalized++
			case s.Code == limiter.OverLimit && s.Limit != nil && strings.HasPrefix(s.Limit.Name, override.NamePrefix):
				tr.overridden++
			case s.Code == limiter.OverLimit && req.Descriptors[j].Override != nil:
				tr.envoy++
			}
		}
	}
	if _, err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	if st := rec.Status(); st.Dropped != 0 {
		t.Fatalf("%d lines dropped", st.Dropped)
	}
	tr.file = out.Bytes()
	return tr
}

func replay(t *testing.T, tr traffic, opts record.ReplayOptions) *record.Report {
	t.Helper()
	rep, err := record.Replay(context.Background(), []record.Input{{Name: "rec.jsonl", R: bytes.NewReader(tr.file)}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestReplayReproduces replays a recording through the rules it was made
// under: every recorded verdict — of the four algorithms, penalties, an
// operator's override made while recording, Envoy's limit overrides,
// usage charged always and refunds — comes out the same.
func TestReplayReproduces(t *testing.T) {
	tree := loadRules(t, exactRules)
	tr := run(t, tree, 4000, 0, false)
	if tr.penalized == 0 || tr.overridden == 0 || tr.envoy == 0 {
		t.Fatalf("the traffic exercises too little: %d penalized, %d rejected by the override, %d by Envoy's", tr.penalized, tr.overridden, tr.envoy)
	}
	rep := replay(t, tr, record.ReplayOptions{Rules: tree})
	if rep.Calls != 4000 || rep.Refused != 0 {
		t.Fatalf("replayed %d calls, refused %d (%s); want 4000, 0", rep.Calls, rep.Refused, rep.RefusedReason)
	}
	if r := rep.Reproduction; r.Set != "rules" || r.Compared != tr.descriptors || r.Differ != 0 {
		t.Fatalf("reproduction = %+v, want all %d descriptors of the rules reproduced", r, tr.descriptors)
	}
	if rep.NewlyRejected != 0 || rep.NewlyAdmitted != 0 || rep.RejectedBefore != rep.RejectedAfter {
		t.Fatalf("report = %+v, want nothing changed", rep)
	}
	rejected := map[string]int64{}
	for _, r := range rep.Rules {
		rejected[r.Rule] = r.RejectedAfter
	}
	for _, rule := range []string{"client", "client/op=fixed", "client/op=counter", "client/op=log", "client/op=penalized"} {
		if rejected[rule] == 0 {
			t.Errorf("rule %s rejected nothing: %v", rule, rejected)
		}
	}

	// The same recording against a lower limit is a change, and no
	// reproduction; with the recorded rules as the baseline it is both.
	lower := loadRules(t, strings.Replace(exactRules, "requests_per_unit: 20", "requests_per_unit: 10", 1))
	rep = replay(t, tr, record.ReplayOptions{Rules: lower})
	if rep.NewlyRejected == 0 || rep.NewlyAdmitted != 0 || rep.Reproduction.Set != "" || rep.Reproduction.Compared != 0 {
		t.Fatalf("lower limit against the recording: %+v", rep)
	}
	against := replay(t, tr, record.ReplayOptions{Rules: lower, Baseline: tree})
	if r := against.Reproduction; r.Set != "baseline" || r.Differ != 0 || r.Compared != tr.descriptors {
		t.Fatalf("reproduction through the baseline = %+v", r)
	}
	if against.NewlyRejected != rep.NewlyRejected || against.Decisions != 2*against.Calls {
		t.Fatalf("newly rejected %d with the baseline, %d against the recording; %d decisions of %d calls",
			against.NewlyRejected, rep.NewlyRejected, against.Decisions, against.Calls)
	}
}

// TestReplaySaysWhy replays recordings that cannot be reproduced, and
// checks the replay says why.
func TestReplaySaysWhy(t *testing.T) {
	tree := loadRules(t, exactRules)
	t.Run("recording began mid-window", func(t *testing.T) {
		rep := replay(t, run(t, tree, 4000, 2000, false), record.ReplayOptions{Rules: tree})
		if r := rep.Reproduction; r.Differ == 0 || r.Reasons[record.ReasonBefore] == 0 || r.Reasons[record.ReasonRule] != 0 {
			t.Fatalf("reproduction = %+v, want differences from before the recording", r)
		}
	})
	t.Run("another instance", func(t *testing.T) {
		rep := replay(t, run(t, tree, 4000, 0, true), record.ReplayOptions{Rules: tree})
		if r := rep.Reproduction; r.Reasons[record.ReasonMissing] == 0 || r.Reasons[record.ReasonRule] != 0 {
			t.Fatalf("reproduction = %+v, want hits the recording lacks", r)
		}
	})
}

// TestReplayNothing replays a recording of a header alone: a report of
// no calls, not an error.
func TestReplayNothing(t *testing.T) {
	const header = `{"type":"header","version":1,"rules_hash":"h","start":"2026-11-28T17:00:00Z","sample":1,"key":"","overrides":[]}` + "\n"
	rep, err := record.Replay(context.Background(), []record.Input{{Name: "empty", R: strings.NewReader(header)}},
		record.ReplayOptions{Rules: loadRules(t, exactRules)})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil || rep.Calls != 0 || !strings.HasPrefix(out.String(), "Replayed no calls, through rules") {
		t.Fatalf("report %+v, %v:\n%s", rep, err, out.String())
	}
}
