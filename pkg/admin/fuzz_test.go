package admin_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/audit"
	"github.com/tollgatehq/tollgate/pkg/httpapi"
	"github.com/tollgatehq/tollgate/pkg/override"
)

// fuzzRemote numbers the remote addresses of FuzzAdmin's calls, so that no
// input shares an address, and so a throttle, with another.
var fuzzRemote atomic.Uint32

// FuzzAdmin sends an arbitrary body to POST /v1/overrides, /v1/remaining and
// /v1/reset, and arbitrary ?domain=, ?limit= and ?reason= values to the
// routes that read them, on a server of real parts (newServer). It asserts:
//
//   - no call panics or answers 5xx;
//   - a refused body or value gets 400 with the JSON error body and a
//     reason; ?limit= is refused exactly when it is not a positive number;
//   - an override that is created (201) is listed by GET /v1/overrides,
//     with and without ?domain= its domain, and read back by GET
//     /v1/overrides/{id} as it was answered; its delete (200) removes it;
//   - GET /v1/overrides?domain= lists only that domain's overrides;
//   - /v1/remaining answers a CheckResponse, and a reset (200) is audited
//     with ?reason= exactly as given;
//   - POST /v1/record starts a recording (then stopped) or answers 400;
//   - GET /v1/top answers 200 or 400 whatever its query, and GET /v1/rules
//     200.
func FuzzAdmin(f *testing.F) {
	const entries = `"domain":"api","entries":[{"key":"api_key","value":"k1"}]`
	for _, seed := range []struct{ body, domain, limit, reason string }{
		{`{` + entries + `,"limit":{"requests_per_unit":5000,"unit":"MINUTE"},"expires_in":"48h","reason":"launch"}`, "api", "", "launch"},
		{`{` + entries + `,"multiplier":2.5,"expires_at":"2026-01-02T00:00:00+01:00"}`, "", "3", ""},
		{`{"domain":"api","entries":[{"key":"api_key","value":"k1"},{"key":"endpoint","value":"/a"}],"multiplier":1e308,"expires_in":"1ns"}`, "other", "0", "a&b=c"},
		{`{"domain":"api","entries":[{"key":"tier","value":"vip"}],"limit":{"requests_per_unit":0,"unit":"second"},"expires_in":"2562047h"}`, "api", "-1", "\x00"},
		{`{` + entries + `,"multiplier":-1,"expires_in":"1h"}`, "", "9223372036854775808", ""},
		{`{` + entries + `,"multiplier":2,"limit":{"requests_per_unit":1,"unit":"fortnight"},"expires_in":"1h"}`, "", "x", ""},
		{`{` + entries + `,"multiplier":2,"expires_at":"0001-01-01T00:00:00Z"}`, "", "", ""},
		{`{` + entries + `,"multiplier":2,"expires_in":"1h"} {}`, "", "", ""},
		{`{"domain":"nope","entries":[],"multiplier":2,"expires_in":"1h"}`, "nope", "", ""},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]}]}`, "", "1", "quota reset"},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k1"}],"hits":5,"refund":true,"charge":"always"}]}`, "", "", ""},
		{`{"domain":"api","descriptors":[]}`, "", "", ""},
		{`{"duration":"10m","sample":0.1,"reason":"incident"}`, "", "", ""},
		{`{"duration":"-1s","sample":2}`, "", "", ""},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]}]}`, "api", "1000", "rejected"},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]}]}`, "api", "1001", "1h"},
		{`{"domain":`, "\xff", "+1", "\xff"},
		{``, "", "", ""},
	} {
		f.Add([]byte(seed.body), seed.domain, seed.limit, seed.reason)
	}
	f.Fuzz(func(t *testing.T, body []byte, domain, limit, reason string) {
		s := newServer(t)
		remote := fmt.Sprintf("192.0.2.%d:%d", 1+fuzzRemote.Load()%250, 1024+fuzzRemote.Add(1)%60000)
		call := func(method, target string, body []byte) *httptest.ResponseRecorder {
			req := httptest.NewRequest(method, target, bytes.NewReader(body))
			req.RemoteAddr = remote
			req.Header.Set("Authorization", "Bearer "+aliceToken)
			rec := httptest.NewRecorder()
			s.h.ServeHTTP(rec, req)
			if rec.Code >= 500 || rec.Code == http.StatusTooManyRequests {
				t.Fatalf("%s %s: %d %s\nbody: %q", method, target, rec.Code, rec.Body, body)
			}
			if rec.Code == http.StatusBadRequest {
				checkError(t, method+" "+target, rec)
			}
			return rec
		}
		withQuery := func(path, name, value string) string {
			return path + "?" + url.Values{name: {value}}.Encode()
		}

		// POST /v1/overrides.
		var created *override.Override
		switch rec := call(http.MethodPost, "/v1/overrides", body); rec.Code {
		case http.StatusCreated:
			created = new(override.Override)
			decodeJSON(t, rec, created)
			if created.ID == "" {
				t.Fatalf("created without an id: %s", rec.Body)
			}
		case http.StatusBadRequest:
		default:
			t.Fatalf("POST /v1/overrides: %d %s, want 201 or 400", rec.Code, rec.Body)
		}
		if created != nil {
			for _, target := range []string{"/v1/overrides", withQuery("/v1/overrides", "domain", created.Domain)} {
				if !slices.Contains(listIDs(t, call(http.MethodGet, target, nil)), created.ID) {
					t.Fatalf("GET %s does not list the override created, %+v", target, created)
				}
			}
			rec := call(http.MethodGet, "/v1/overrides/"+url.PathEscape(created.ID), nil)
			var got override.Override
			decodeJSON(t, rec, &got)
			if rec.Code != http.StatusOK || !reflect.DeepEqual(&got, created) {
				t.Fatalf("GET /v1/overrides/{id}: %d %+v, want 200 %+v", rec.Code, got, *created)
			}
		}

		// GET /v1/overrides?domain=.
		rec := call(http.MethodGet, withQuery("/v1/overrides", "domain", domain), nil)
		var list struct{ Overrides []override.Override }
		decodeJSON(t, rec, &list)
		for _, o := range list.Overrides {
			if domain != "" && o.Domain != domain {
				t.Fatalf("?domain=%q lists an override of %q", domain, o.Domain)
			}
		}

		// POST /v1/remaining.
		if rec := call(http.MethodPost, "/v1/remaining", body); rec.Code == http.StatusOK {
			var out httpapi.CheckResponse
			decodeJSON(t, rec, &out)
		} else if rec.Code != http.StatusBadRequest {
			t.Fatalf("POST /v1/remaining: %d %s, want 200 or 400", rec.Code, rec.Body)
		}

		// POST /v1/reset?reason=.
		switch rec := call(http.MethodPost, withQuery("/v1/reset", "reason", reason), body); rec.Code {
		case http.StatusOK:
			last := s.audit.Last(1)
			if len(last) != 1 || last[0].Action != audit.ActionReset || last[0].Reason != reason {
				t.Fatalf("the reset's audit entry is %+v, want its reason %q", last, reason)
			}
		case http.StatusBadRequest:
		default:
			t.Fatalf("POST /v1/reset: %d %s, want 200 or 400", rec.Code, rec.Body)
		}

		// POST /v1/record with the fuzzed body: started (201), refused
		// with the reason (400), and never 409, since nothing else
		// records here; a recording started is stopped (200).
		switch rec := call(http.MethodPost, "/v1/record", body); rec.Code {
		case http.StatusCreated:
			if rec := call(http.MethodDelete, "/v1/record", nil); rec.Code != http.StatusOK {
				t.Fatalf("DELETE /v1/record after a start: %d %s", rec.Code, rec.Body)
			}
		case http.StatusBadRequest:
		default:
			t.Fatalf("POST /v1/record: %d %s, want 201 or 400", rec.Code, rec.Body)
		}

		// GET /v1/top and /v1/rules, the fuzzed values as their query:
		// 200, or 400 with the reason for a query the API refuses.
		topQuery := url.Values{"domain": {domain}, "limit": {limit}, "by": {reason}, "window": {reason}, "rule": {reason}}
		if rec := call(http.MethodGet, "/v1/top?"+topQuery.Encode(), nil); rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Fatalf("GET /v1/top: %d %s, want 200 or 400", rec.Code, rec.Body)
		}
		if rec := call(http.MethodGet, withQuery("/v1/rules", "domain", domain), nil); rec.Code != http.StatusOK {
			t.Fatalf("GET /v1/rules: %d %s, want 200", rec.Code, rec.Body)
		}

		// GET /v1/audit?limit=.
		n, err := strconv.Atoi(limit)
		wantOK := limit == "" || (err == nil && n > 0)
		rec = call(http.MethodGet, withQuery("/v1/audit", "limit", limit), nil)
		if (rec.Code == http.StatusOK) != wantOK {
			t.Fatalf("GET /v1/audit?limit=%q: %d %s", limit, rec.Code, rec.Body)
		}
		if wantOK {
			var out struct{ Entries []audit.Entry }
			decodeJSON(t, rec, &out)
			if limit != "" && len(out.Entries) > n {
				t.Fatalf("?limit=%d answered %d entries", n, len(out.Entries))
			}
		}

		// DELETE /v1/overrides/{id}?reason=.
		if created != nil {
			target := "/v1/overrides/" + url.PathEscape(created.ID)
			if rec := call(http.MethodDelete, withQuery(target, "reason", reason), nil); rec.Code != http.StatusOK {
				t.Fatalf("DELETE %s: %d %s", target, rec.Code, rec.Body)
			}
			if rec := call(http.MethodGet, target, nil); rec.Code != http.StatusNotFound {
				t.Fatalf("GET %s after its delete: %d %s", target, rec.Code, rec.Body)
			}
		}
	})
}

// checkError fails t unless rec is the API's JSON error with a reason.
func checkError(t *testing.T, call string, rec *httptest.ResponseRecorder) {
	t.Helper()
	var e map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e["error"] == "" || e["status"] != strconv.Itoa(rec.Code) ||
		rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%s: %d %s, want the JSON error with a reason", call, rec.Code, rec.Body)
	}
}

// decodeJSON decodes the JSON answer rec into v, or fails t.
func decodeJSON(t *testing.T, rec *httptest.ResponseRecorder, v any) {
	t.Helper()
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Fatalf("answer %d %s: %v", rec.Code, rec.Body, err)
	}
}

// listIDs returns the ids GET /v1/overrides answered in rec.
func listIDs(t *testing.T, rec *httptest.ResponseRecorder) []string {
	t.Helper()
	var list struct{ Overrides []override.Override }
	decodeJSON(t, rec, &list)
	ids := make([]string, len(list.Overrides))
	for i, o := range list.Overrides {
		ids[i] = o.ID
	}
	return ids
}
