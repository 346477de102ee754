package app_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/record"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// recordRules give each tenant 3 calls an hour on /a, sharded by tenant.
const recordRules = `domain: api
shard_by: tenant
descriptors:
  - key: path
    value: /a
    descriptors:
      - key: tenant
        rate_limit: {unit: hour, requests_per_unit: 3, algorithm: fixed_window, name: per_tenant}
`

// sentCall is a call the test sent and the answer it got.
type sentCall struct {
	tenant string
	codes  []string
}

// sendCalls sends calls of every tenant in turn, each with the
// descriptor path=/a,tenant=T and a second that matches no rule, and
// returns what each was answered.
func sendCalls(t *testing.T, addr string, tenants, rounds int) []sentCall {
	t.Helper()
	client, err := rlsclient.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var sent []sentCall
	for range rounds {
		for i := range tenants {
			tenant := fmt.Sprintf("tenant-%02d", i)
			resp, err := client.Query(t.Context(), rlsclient.Request{Domain: "api", Descriptors: [][]descriptor.Entry{
				{{Key: "path", Value: "/a"}, {Key: "tenant", Value: tenant}},
				{{Key: "other", Value: tenant}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			c := sentCall{tenant: tenant}
			for _, st := range resp.Statuses {
				c.codes = append(c.codes, st.Code.String())
			}
			sent = append(sent, c)
		}
	}
	return sent
}

// readRecording decodes the recording at path, failing the test on any
// error, and returns its header and its call lines.
func readRecording(t *testing.T, path string) (*record.Header, []*record.Call) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd := record.NewReader(f)
	var calls []*record.Call
	for {
		l, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return rd.Header(), calls
		}
		if err != nil {
			t.Fatal(err)
		}
		if l.Call != nil {
			calls = append(calls, l.Call)
		}
	}
}

func TestRecordsTrafficWhole(t *testing.T) {
	dir := t.TempDir()
	apptest.WriteFile(t, filepath.Join(dir, "api.yaml"), recordRules)
	path := filepath.Join(t.TempDir(), "calls.jsonl")
	svc := apptest.Start(t, dir, apptest.Options{Settings: func(s *app.Settings) { s.Record.File = path }})
	sent := sendCalls(t, svc.GRPCAddr, 4, 5)
	if err := svc.Stop(); err != nil { // writes what is queued
		t.Fatal(err)
	}

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("recording mode %v, want 0600", fi.Mode().Perm())
	}
	h, calls := readRecording(t, path)
	if h.RulesHash == "" || h.Sample != 1 {
		t.Fatalf("header = %+v", h)
	}
	if len(calls) != len(sent) {
		t.Fatalf("%d calls recorded, %d sent", len(calls), len(sent))
	}
	over := 0
	for i, c := range calls {
		want := sent[i] // one client sends in order
		if c.Domain != "api" || len(c.Descriptors) != 2 || c.Descriptors[0].Entries[1].Value != want.tenant {
			t.Fatalf("call %d = %+v, sent by %s", i, c, want.tenant)
		}
		if i > 0 && c.Time < calls[i-1].Time {
			t.Fatalf("call %d at %d before call %d at %d", i, c.Time, i-1, calls[i-1].Time)
		}
		d, other := c.Descriptors[0], c.Descriptors[1]
		if d.Code != want.codes[0] || other.Code != want.codes[1] {
			t.Fatalf("call %d recorded %s, %s; answered %v", i, d.Code, other.Code, want.codes)
		}
		if d.Rule != "path=/a/tenant" || d.Limit != "per_tenant" || other.Rule != "" || other.Limit != "" {
			t.Fatalf("call %d: rules %+v, %+v", i, d, other)
		}
		if d.Code == rlsv3.RateLimitResponse_OVER_LIMIT.String() {
			over++
		}
	}
	if over != 4*2 { // 5 calls a tenant, 3 admitted
		t.Fatalf("%d rejections recorded, want 8", over)
	}
}

func TestRecordSamplesWholeClients(t *testing.T) {
	dir := t.TempDir()
	apptest.WriteFile(t, filepath.Join(dir, "api.yaml"), recordRules)
	path := filepath.Join(t.TempDir(), "calls.jsonl")
	svc := apptest.Start(t, dir, apptest.Options{Settings: func(s *app.Settings) { s.Record.File, s.Record.Sample = path, 0.5 }})
	const tenants, rounds = 30, 3
	sendCalls(t, svc.GRPCAddr, tenants, rounds)
	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}
	_, calls := readRecording(t, path)
	per := map[string]int{}
	for _, c := range calls {
		per[c.Descriptors[0].Entries[1].Value]++
	}
	for tenant, n := range per {
		if n != rounds {
			t.Errorf("%s: %d of its %d calls recorded", tenant, n, rounds)
		}
	}
	if len(per) == 0 || len(per) == tenants {
		t.Fatalf("%d of %d clients recorded at sample 0.5", len(per), tenants)
	}
}
