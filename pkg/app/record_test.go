package app_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/polltest"
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

func TestRecordThroughAdminAPI(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls.jsonl")
	a := apptest.StartAdmin(t, func(s *app.Settings) { s.Record.File, s.Record.OnStart = path, false })
	url := "http://" + a.AdminAddr + "/v1/record"
	var st record.Status
	if code := apptest.GetJSON(t, url, apptest.OpsToken, &st); code != 200 || st.On {
		t.Fatalf("GET before a recording: %d %+v, want 200 and off", code, st)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file before any recording: %v", err)
	}
	if code := apptest.Send(t, "POST", url, apptest.OpsToken, `{"duration":"10m","sample":1,"reason":"try a limit"}`); code != 201 {
		t.Fatalf("POST: %d, want 201", code)
	}
	if code := apptest.Send(t, "POST", url, apptest.OpsToken, `{"duration":"10m"}`); code != 409 {
		t.Fatalf("a second POST: %d, want 409", code)
	}
	if code := apptest.GetJSON(t, url, apptest.OpsToken, &st); code != 200 || !st.On || st.Until == nil || st.File != path {
		t.Fatalf("GET while recording: %d %+v", code, st)
	}
	if code := apptest.Send(t, "POST", "http://"+a.AdminAddr+"/v1/overrides", apptest.OpsToken,
		`{"domain":"api","entries":[{"key":"api_key","value":"k1"}],"multiplier":2,"expires_in":"1h"}`); code != 201 {
		t.Fatalf("creating an override: %d", code)
	}
	client, err := rlsclient.Dial(a.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for range 5 {
		if _, err := client.Query(t.Context(), rlsclient.Request{Domain: "api", Descriptors: [][]descriptor.Entry{{{Key: "api_key", Value: "k1"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	// What remains is the operator's question, not traffic: not recorded.
	if code := apptest.Send(t, "POST", "http://"+a.AdminAddr+"/v1/remaining", apptest.OpsToken,
		`{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]}]}`); code != 200 {
		t.Fatalf("POST /v1/remaining: %d", code)
	}
	if code := apptest.Send(t, "DELETE", url+"?reason=enough", apptest.OpsToken, ""); code != 200 {
		t.Fatalf("DELETE: %d, want 200", code)
	}
	if code := apptest.Send(t, "DELETE", url, apptest.OpsToken, ""); code != 404 {
		t.Fatalf("a second DELETE: %d, want 404", code)
	}
	if code := apptest.GetJSON(t, url, apptest.OpsToken, &st); code != 200 || st.On || st.Lines != 6 || st.Dropped != 0 {
		t.Fatalf("GET after the stop: %d %+v, want off with 6 lines (5 calls and the override)", code, st)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd := record.NewReader(f)
	var calls, overrides int
	for {
		l, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case l.Call != nil:
			calls++
			// 2 a minute, doubled by the override: 4 admitted.
			if want := map[bool]string{true: "OK", false: "OVER_LIMIT"}[calls <= 4]; l.Call.Descriptors[0].Code != want {
				t.Errorf("call %d recorded %s, want %s", calls, l.Call.Descriptors[0].Code, want)
			}
		case l.Override != nil:
			overrides++
			if l.Override.Change != record.ChangeCreated || calls != 0 {
				t.Errorf("override line %+v after %d calls, want created before them", l.Override, calls)
			}
		}
	}
	if calls != 5 || overrides != 1 || rd.Header().Sample != 1 {
		t.Fatalf("%d calls and %d overrides recorded, header %+v", calls, overrides, rd.Header())
	}
	audit, err := os.ReadFile(a.AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"action":"record.start"`, `"reason":"try a limit"`, `"action":"record.stop"`, `"reason":"enough"`} {
		if !strings.Contains(string(audit), want) {
			t.Errorf("the audit log lacks %s:\n%s", want, audit)
		}
	}

	// A span ends by itself.
	if code := apptest.Send(t, "POST", url, apptest.OpsToken, `{"duration":"1ms"}`); code != 201 {
		t.Fatalf("POST of a short span: %d, want 201", code)
	}
	polltest.Eventually(t, 5*time.Second, func() bool {
		apptest.GetJSON(t, url, apptest.OpsToken, &st)
		return !st.On
	}, "the recording did not end with its span")
	if prev, err := os.Stat(path + ".1"); err != nil || prev.Size() == 0 {
		t.Fatalf("the previous recording was not kept as .1: %v", err)
	}
}

func TestRecordNeedsAFile(t *testing.T) {
	a := apptest.StartAdmin(t)
	if code := apptest.Send(t, "POST", "http://"+a.AdminAddr+"/v1/record", apptest.OpsToken, `{"duration":"10m"}`); code != 400 {
		t.Fatalf("POST without --record-file: %d, want 400", code)
	}
}
