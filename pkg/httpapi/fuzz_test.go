package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

// fuzzRules gives FuzzCheck one rule of each kind a body can reach: every
// algorithm, a penalty, allow and deny actions and a nested rule.
const fuzzRules = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 3, algorithm: sliding_window_log}
  - key: user
    value: vip
    action: allow
  - key: user
    value: banned
    action: deny
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window, penalty: {cooldown: 10s}}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 2}
  - key: window
    failure_mode: open
    rate_limit: {unit: hour, requests_per_unit: 4, algorithm: sliding_window_counter}
`

// FuzzCheck posts arbitrary bytes to POST /v1/check, twice to a handler
// over the memory store (the second answer sees the first one's counts) and
// once to a handler whose store is down. Every answer must be one of:
//
//   - 400 with the JSON error body {"error": reason, "status": "400"};
//   - 200 or 429 with a CheckResponse holding one status per descriptor of
//     the body, each OK or OVER_LIMIT, allowed exactly when the status is
//     200;
//   - 503 with the JSON error body, only from the store that is down.
//
// A panic fails the fuzz run by itself.
func FuzzCheck(f *testing.F) {
	tree, err := descriptor.LoadFS(fstest.MapFS{"api.yaml": {Data: []byte(fuzzRules)}}, descriptor.Options{})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u1"},{"key":"path","value":"/a"}]},{"entries":[{"key":"user","value":"vip"}]}]}`,
		`{"domain":"api","hits":3,"descriptors":[{"entries":[{"key":"client","value":"c"}]},{"entries":[{"key":"user","value":"banned"}]}]}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"bucket","value":"b"}],"hits":18446744073709551615,"charge":"always"}]}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"window","value":"w"}],"hits":0,"refund":true}]}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"bucket","value":"b"}],"charge":"never"}]}`,
		`{"domain":"nope","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}`,
		`{"domain":"api","descriptors":[]}`,
		`{"domain":"api","descriptors":null}`,
		`{"domain":"api","descriptors":[{"entries":[]}]}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"","value":"x"}]}]}`,
		`{"domain":"api","Descriptors":[{"entries":[{"key":"user","value":"u1"}]}],"descriptors":[]}`,
		`{"domain":"api","unknown":1}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]} trailing`,
		`{"domain":"api","hits":-1}`,
		`{"domain":"api","hits":4294967296}`,
		`{"domain":"api\ud800","descriptors":[{"entries":[{"key":"user","value":"\u0000"}]}]}`,
		`[]`,
		`null`,
		`{"domain":`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		now := func() time.Time { return time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC) }
		newHandler := func(st store.Store) http.Handler {
			lim, err := limiter.New(limiter.Options{
				Store:       st,
				Tree:        func() *descriptor.Tree { return tree },
				HeaderStyle: limiter.HeadersXRateLimit,
				Now:         now,
			})
			if err != nil {
				t.Fatal(err)
			}
			return New(Options{Limiter: lim, MaxBodySize: 4096})
		}
		up := newHandler(memory.New(memory.Options{MaxKeys: 1000, Now: now}))
		down := newHandler(storetest.Failing{Err: store.ErrUnavailable})
		for i, h := range []http.Handler{up, up, down} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(body)))
			if msg := checkAnswer(body, rec, h == down); msg != "" {
				t.Fatalf("answer %d: %s\nbody: %q\nanswer: %d %s", i, msg, body, rec.Code, rec.Body)
			}
		}
	})
}

// checkAnswer returns what is wrong with the answer rec to a POST /v1/check
// of body, or "". storeDown allows the 503 of a store that fails.
func checkAnswer(body []byte, rec *httptest.ResponseRecorder, storeDown bool) string {
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		return "Content-Type " + ct
	}
	switch rec.Code {
	case http.StatusBadRequest, http.StatusServiceUnavailable:
		if rec.Code == http.StatusServiceUnavailable && !storeDown {
			return "503 from the memory store"
		}
		var e map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
			return "error body is not JSON: " + err.Error()
		}
		if e["error"] == "" || e["status"] != strconv.Itoa(rec.Code) || len(e) != 2 {
			return "error body is not {error, status}"
		}
		return ""
	case http.StatusOK, http.StatusTooManyRequests:
	default:
		return "unexpected status"
	}
	// The handler decodes the first JSON value of the body; so does this.
	var in struct {
		Descriptors []json.RawMessage `json:"descriptors"`
	}
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&in); err != nil {
		return "accepted a body that does not decode: " + err.Error()
	}
	var out CheckResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		return "answer is not a CheckResponse: " + err.Error()
	}
	switch {
	case len(out.Statuses) != len(in.Descriptors):
		return "statuses do not match descriptors one to one"
	case out.Allowed != (rec.Code == http.StatusOK):
		return "allowed does not match the status"
	case out.Code != map[bool]string{true: "OK", false: "OVER_LIMIT"}[out.Allowed]:
		return "code does not match allowed"
	}
	for _, st := range out.Statuses {
		if st.Code != "OK" && st.Code != "OVER_LIMIT" {
			return "status code " + st.Code
		}
	}
	return ""
}
