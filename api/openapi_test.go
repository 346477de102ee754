package api_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/tollgatehq/tollgate/api"
	"github.com/tollgatehq/tollgate/pkg/admin"
	"github.com/tollgatehq/tollgate/pkg/audit"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/httpapi"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/override/statefile"
	"github.com/tollgatehq/tollgate/pkg/record"
	"github.com/tollgatehq/tollgate/pkg/reload"
	"github.com/tollgatehq/tollgate/pkg/rls"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/telemetry"
	"github.com/tollgatehq/tollgate/pkg/top"
	"github.com/tollgatehq/tollgate/pkg/ui"
)

const (
	openAPIRules = `domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: tier
    value: vip
    action: allow
`
	adminToken = "openapi-test-token"
)

// registerPageDecoders lets the validation read the status page's
// answers, which are text of types kin-openapi has no decoder for.
var registerPageDecoders = sync.OnceFunc(func() {
	for _, contentType := range []string{"text/html", "text/javascript", "text/css"} {
		openapi3filter.RegisterBodyDecoder(contentType, openapi3filter.PlainBodyDecoder)
	}
})

func loadOpenAPI(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	registerPageDecoders()
	doc, err := openapi3.NewLoader().LoadFromData([]byte(api.OpenAPI()))
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the document is not valid OpenAPI 3: %v", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return doc, router
}

// The servers of the document: the public listener and the admin one.
const (
	publicServer = "http://localhost:8080"
	adminServer  = "http://127.0.0.1:8082"
)

// testAPI is the HTTP API with every part tollgate serves it with: the JSON
// check, /json, metrics, probes, the admin API and its status page, on
// real parts.
type testAPI struct {
	public *httpapi.Handler
	// admin is the admin listener's handler: the admin API behind the
	// status page, as tollgate serves them.
	admin *ui.Handler
	// notReady makes the probes answer 503.
	notReady bool
}

func newTestAPI(t *testing.T) *testAPI {
	t.Helper()
	tree, err := descriptor.LoadFS(fstest.MapFS{"api.yaml": {Data: []byte(openAPIRules)}}, descriptor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	treeFn := func() *descriptor.Tree { return tree }
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	backend, err := statefile.Open(t.TempDir(), statefile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	registry, err := override.NewRegistry(override.Options{Backend: backend, Tree: treeFn, MeterProvider: tel.MeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	recorder, err := record.New(record.Options{Path: filepath.Join(t.TempDir(), "calls.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(recorder.Close)
	rec, err := top.New(top.Options{})
	if err != nil {
		t.Fatal(err)
	}
	shadowRec, err := top.New(top.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(limiter.Options{
		Store: memory.New(memory.Options{}), Tree: treeFn, Overrides: registry.Current,
		HeaderStyle: limiter.HeadersXRateLimit, MeterProvider: tel.MeterProvider(), Observer: topObserver{rec}, Recorder: recorder,
	})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := admin.NewTokens(admin.TokensOptions{Env: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := reload.New(reload.Options{Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := rules.Apply("initial", func() (*descriptor.Tree, error) { return tree, nil }); err != nil {
		t.Fatal(err)
	}
	_ = rules.Apply("broken", func() (*descriptor.Tree, error) { return nil, errors.New("api.yaml:1: broken") })
	adm, err := admin.New(admin.Options{
		Tokens: tokens, Overrides: registry, Limiter: lim, Resetter: lim,
		Audit:       audit.New(audit.Options{Logger: slog.New(slog.DiscardHandler)}),
		RuleHistory: rules.History,
		Top:         rec,
		ShadowTop:   shadowRec,
		Recorder:    recorder,
		Status: func() admin.Status {
			st := rules.Status()
			return admin.Status{Version: "test", Store: "memory", Overrides: registry.Current().Len(),
				Rules:  admin.RulesStatus{Source: "test", Hash: st.Hash, LoadedAt: st.LastSuccess, LastError: st.LastError.Error(), Reloads: st.Reloads, Failures: st.Failures},
				Shadow: &admin.ShadowStatus{Rules: admin.RulesStatus{Source: "shadow", LastError: "api.yaml:1: broken", Failures: 1}, Decided: 3}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	page, err := ui.New(ui.Options{API: adm})
	if err != nil {
		t.Fatal(err)
	}
	a := &testAPI{admin: page}
	a.public = httpapi.New(httpapi.Options{
		Limiter: lim,
		JSON:    rls.New(rls.Options{Limiter: lim}).JSONHandler(),
		Metrics: tel.Handler(),
		Ready: func() error {
			if a.notReady {
				return errors.New("no descriptor configuration loaded")
			}
			return nil
		},
		AdminRoutes: page.Routes(),
	})
	return a
}

// topObserver lets the limiter tell rec about every decision, as the app
// does.
type topObserver struct{ rec *top.Recorder }

func (o topObserver) Rule(domain, rule, limit string, lim *descriptor.Limit) limiter.RuleObserver {
	return o.rec.Rule(domain, rule, limit, lim)
}

// handlers returns the handler of each of the document's servers.
func (a *testAPI) handlers() map[string]http.Handler {
	return map[string]http.Handler{publicServer: a.public, adminServer: a.admin}
}

// pathParam turns an http.ServeMux wildcard into OpenAPI's form, which is
// the same but for a trailing "..." that no route of ours uses.
var pathParam = regexp.MustCompile(`\{[a-z_]+\}`)

// exactPath is how a pattern that ends in a slash matches that path only;
// an OpenAPI path is always exact, so it is written without it.
const exactPath = "{$}"

// TestOpenAPIRoutes holds the document to the routes served: every route
// served is documented on the server of its listener, and every documented
// operation is served there. The public listener's stand-ins for the admin
// routes (a 404 that points to the admin listener) are not documented.
func TestOpenAPIRoutes(t *testing.T) {
	doc, _ := loadOpenAPI(t)
	var documented []string
	for path, item := range doc.Paths.Map() {
		servers := doc.Servers
		if len(item.Servers) > 0 {
			servers = item.Servers
		}
		for method := range item.Operations() {
			for _, server := range servers {
				documented = append(documented, server.URL+" "+method+" "+path)
			}
		}
	}
	a := newTestAPI(t)
	var served []string
	for _, route := range a.public.Routes() {
		if !slices.Contains(a.admin.Routes(), route) {
			served = append(served, publicServer+" "+strings.TrimSuffix(route, exactPath))
		}
	}
	for _, route := range a.admin.Routes() {
		served = append(served, adminServer+" "+strings.TrimSuffix(route, exactPath))
	}
	for _, route := range served {
		if !pathParam.MatchString(route) && strings.Contains(route, "{") {
			t.Errorf("route %q has a wildcard OpenAPI cannot write", route)
		}
	}
	slices.Sort(documented)
	slices.Sort(served)
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("%s is served but not documented in api/openapi.yaml", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("%s is documented in api/openapi.yaml but not served", r)
		}
	}
}

// call is one request of TestOpenAPIAnswers and the status it must get.
type call struct {
	method, target, body string
	token                bool
	// invalid marks a request the document itself rejects, sent to get an
	// error answer; its answer is still checked.
	invalid bool
	want    int
}

// TestOpenAPIAnswers makes real calls to every operation, for success and
// for failure, and validates each request and answer against the
// document; an answer whose status the document does not list fails.
func TestOpenAPIAnswers(t *testing.T) {
	doc, router := loadOpenAPI(t)
	a := newTestAPI(t)
	const (
		k1       = `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]}]}`
		vip      = `{"domain":"api","descriptors":[{"entries":[{"key":"tier","value":"vip"}],"hits":2,"charge":"always"}],"hits":1}`
		json1    = `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"j1"}]}],"hitsAddend":1}`
		override = `{"domain":"api","entries":[{"key":"api_key","value":"k9"}],"multiplier":3,"expires_in":"1h","reason":"test"}`
	)
	absolute := `{"domain":"api","entries":[{"key":"api_key","value":"k8"}],"limit":{"requests_per_unit":5,"unit":"hour"},` +
		`"expires_at":"` + time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339) + `"}`
	calls := []call{
		{method: "POST", target: "/v1/check", body: k1, want: 200},
		{method: "POST", target: "/v1/check", body: vip, want: 200},
		{method: "POST", target: "/v1/check", body: k1, want: 429},
		{method: "POST", target: "/v1/check", body: `{"domain":"api","descriptors":[{"entries":[]}]}`, want: 400},
		{method: "POST", target: "/v1/check", body: `{"domain":1}`, invalid: true, want: 400},
		{method: "POST", target: "/json", body: json1, want: 200},
		{method: "POST", target: "/json", body: json1, want: 429},
		{method: "POST", target: "/json", body: `{"domain":"api","descriptors":[]}`, want: 400},
		{method: "GET", target: "/healthz", want: 200},
		{method: "GET", target: "/readyz", want: 200},
		{method: "GET", target: "/healthcheck", want: 200},
		{method: "GET", target: "/metrics", want: 200},
		{method: "POST", target: "/v1/overrides", body: override, token: true, want: 201},
		{method: "POST", target: "/v1/overrides", body: absolute, token: true, want: 201},
		{method: "POST", target: "/v1/overrides", body: override, want: 401},
		{method: "POST", target: "/v1/overrides", body: `{"domain":"web","entries":[{"key":"api_key","value":"k9"}],"multiplier":3,"expires_in":"1h"}`,
			token: true, want: 400},
		{method: "GET", target: "/v1/overrides", token: true, want: 200},
		{method: "GET", target: "/v1/overrides?domain=api", token: true, want: 200},
		{method: "GET", target: "/v1/overrides", want: 401},
		{method: "GET", target: "/v1/overrides/{id}", token: true, want: 200},
		{method: "GET", target: "/v1/overrides/nope", token: true, want: 404},
		{method: "DELETE", target: "/v1/overrides/{id}?reason=done", token: true, want: 200},
		{method: "DELETE", target: "/v1/overrides/{id}", token: true, want: 404},
		{method: "POST", target: "/v1/remaining", body: k1, token: true, want: 200},
		{method: "POST", target: "/v1/remaining", body: `{"domain":"","descriptors":[]}`, token: true, want: 400},
		{method: "POST", target: "/v1/reset?reason=test", body: k1, token: true, want: 200},
		{method: "POST", target: "/v1/reset", body: `{"domain":"api","descriptors":[{"entries":[]}]}`, token: true, want: 400},
		{method: "GET", target: "/v1/audit?limit=10", token: true, want: 200},
		{method: "GET", target: "/v1/audit", token: true, want: 200},
		{method: "GET", target: "/v1/audit?limit=0", token: true, invalid: true, want: 400},
		{method: "GET", target: "/v1/audit", want: 401},
		{method: "GET", target: "/v1/rules/history", token: true, want: 200},
		{method: "GET", target: "/v1/rules/history", want: 401},
		{method: "GET", target: "/v1/status", token: true, want: 200},
		{method: "GET", target: "/v1/status", want: 401},
		{method: "GET", target: "/v1/top?domain=api&by=requests&window=1m&limit=5", token: true, want: 200},
		{method: "GET", target: "/v1/top?domain=api", token: true, want: 200},
		{method: "GET", target: "/v1/top?domain=api&window=2m", token: true, invalid: true, want: 400},
		{method: "GET", target: "/v1/top?domain=api", want: 401},
		{method: "GET", target: "/v1/rules?domain=api", token: true, want: 200},
		{method: "GET", target: "/v1/rules", want: 401},
		{method: "GET", target: "/v1/top?set=shadow&domain=api", token: true, want: 200},
		{method: "GET", target: "/v1/top?set=other&domain=api", token: true, invalid: true, want: 400},
		{method: "GET", target: "/v1/rules?set=shadow", token: true, want: 200},
		{method: "GET", target: "/v1/rules?set=other", token: true, invalid: true, want: 400},
		{method: "GET", target: "/v1/record", token: true, want: 200},
		{method: "DELETE", target: "/v1/record", token: true, want: 404},
		{method: "POST", target: "/v1/record", body: `{"duration":"10m","sample":0.1,"reason":"test"}`, token: true, want: 201},
		{method: "POST", target: "/v1/record", body: `{"duration":"10m"}`, token: true, want: 409},
		{method: "POST", target: "/v1/record", body: `{"duration":"-1m"}`, token: true, want: 400},
		{method: "POST", target: "/v1/record", body: `{"duration":"10m"}`, want: 401},
		{method: "GET", target: "/v1/record", token: true, want: 200},
		{method: "DELETE", target: "/v1/record?reason=done", token: true, want: 200},
		{method: "DELETE", target: "/v1/record", want: 401},
		{method: "GET", target: "/v1/record", want: 401},
		{method: "GET", target: "/ui/", want: 200},
		{method: "GET", target: "/ui/render.js", want: 200},
		{method: "GET", target: "/ui/app.js", want: 200},
		{method: "GET", target: "/ui/style.css", want: 200},
	}
	exercised := map[*openapi3.Operation]bool{}
	var id string // of the first override created
	for i, c := range calls {
		target := strings.ReplaceAll(c.target, "{id}", id)
		rec, route := exchange(t, router, a.handlers(), c, target)
		exercised[route.Operation] = true
		if rec.Code != c.want {
			t.Errorf("call %d, %s %s: %d %s, want %d", i, c.method, target, rec.Code, rec.Body, c.want)
		}
		if id == "" && rec.Code == http.StatusCreated {
			id = strings.TrimPrefix(rec.Header().Get("Location"), "/v1/overrides/")
		}
	}
	a.notReady = true
	for _, path := range []string{"/readyz", "/healthcheck"} {
		rec, route := exchange(t, router, a.handlers(), call{method: "GET", want: 503}, path)
		exercised[route.Operation] = true
		if rec.Code != http.StatusServiceUnavailable {
			t.Errorf("GET %s while not ready: %d, want 503", path, rec.Code)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if !exercised[op] {
				t.Errorf("no call exercises %s %s", method, path)
			}
		}
	}
}

// exchange sends c to h as target and validates the request (unless
// c.invalid) and the answer against the document's route.
func exchange(t *testing.T, router routers.Router, handlers map[string]http.Handler, c call, target string) (*httptest.ResponseRecorder, *routers.Route) {
	t.Helper()
	var (
		server      string
		route       *routers.Route
		params      map[string]string
		unsupported []string
	)
	for base := range handlers {
		r, p, err := router.FindRoute(httptest.NewRequest(c.method, base+target, nil))
		if err != nil {
			unsupported = append(unsupported, fmt.Sprintf("%s: %v", base, err))
			continue
		}
		if route != nil {
			t.Fatalf("%s %s: documented on both %s and %s", c.method, target, server, base)
		}
		server, route, params = base, r, p
	}
	if route == nil {
		t.Fatalf("%s %s: not in the document: %s", c.method, target, strings.Join(unsupported, "; "))
	}
	newRequest := func() *http.Request {
		req := httptest.NewRequest(c.method, server+target, strings.NewReader(c.body))
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if c.token {
			req.Header.Set("Authorization", "Bearer "+adminToken)
		}
		return req
	}
	in := &openapi3filter.RequestValidationInput{
		Request: newRequest(), PathParams: params, Route: route,
		Options: &openapi3filter.Options{
			AuthenticationFunc: func(_ context.Context, ai *openapi3filter.AuthenticationInput) error {
				if ai.RequestValidationInput.Request.Header.Get("Authorization") == "" {
					return errors.New("no bearer token")
				}
				return nil
			},
		},
	}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil && !c.invalid && c.want != http.StatusUnauthorized {
		t.Errorf("%s %s: the request does not match the document: %v", c.method, target, err)
	}
	rec := httptest.NewRecorder()
	handlers[server].ServeHTTP(rec, newRequest())
	body := rec.Body.Bytes()
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s %s: the %d answer does not match the document: %v\n%s", c.method, target, rec.Code, err, body)
	}
	return rec, route
}

// TestOpenAPIRejectsWrongAnswers checks that the validation above would
// catch an answer that strays from the document.
func TestOpenAPIRejectsWrongAnswers(t *testing.T) {
	_, router := loadOpenAPI(t)
	for _, tc := range []struct {
		name   string
		target string
		status int
		body   string
	}{
		{"undocumented status", "/v1/check", http.StatusTeapot, `{"error":"x","status":"418"}`},
		{"unknown field", "/v1/check", http.StatusOK, `{"code":"OK","allowed":true,"statuses":[],"extra":1}`},
		{"bad enum", "/v1/check", http.StatusOK, `{"code":"MAYBE","allowed":true,"statuses":[]}`},
		{"missing field", "/v1/check", http.StatusBadRequest, `{"error":"x"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, publicServer+tc.target, strings.NewReader("{}"))
			route, params, err := router.FindRoute(req)
			if err != nil {
				t.Fatal(err)
			}
			out := &openapi3filter.ResponseValidationInput{
				RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
				Status:                 tc.status,
				Header:                 http.Header{"Content-Type": {"application/json"}},
				Options:                &openapi3filter.Options{IncludeResponseStatus: true},
			}
			out.SetBodyBytes([]byte(tc.body))
			if err := openapi3filter.ValidateResponse(context.Background(), out); err == nil {
				t.Errorf("the answer %d %s passed", tc.status, tc.body)
			}
		})
	}
}
