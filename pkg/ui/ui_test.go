package ui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/ui"
)

// api is an API that serves routes, answering each with its pattern.
type api struct {
	mux    *http.ServeMux
	routes []string
}

func newAPI(routes ...string) *api {
	a := &api{mux: http.NewServeMux(), routes: routes}
	for _, r := range routes {
		a.mux.HandleFunc(r, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, r) })
	}
	return a
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }
func (a *api) Routes() []string                                 { return a.routes }

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func TestNewNeedsAPI(t *testing.T) {
	if _, err := ui.New(ui.Options{}); err == nil || err.Error() != "ui: missing option API" {
		t.Errorf("New without an API: %v, want ui: missing option API", err)
	}
}

// TestServes checks what each path answers: the page and its files with
// their types and the page's headers, without a token; every other path
// from the API; and the routes, the page's first.
func TestServes(t *testing.T) {
	h, err := ui.New(ui.Options{API: newAPI("GET /v1/status", "GET /v1/overrides")})
	if err != nil {
		t.Fatal(err)
	}
	for path, contentType := range map[string]string{
		"/ui/":          "text/html; charset=utf-8",
		"/ui/render.js": "text/javascript; charset=utf-8",
		"/ui/app.js":    "text/javascript; charset=utf-8",
		"/ui/style.css": "text/css; charset=utf-8",
	} {
		rec := get(t, h, path)
		hdr := rec.Header()
		if rec.Code != http.StatusOK || hdr.Get("Content-Type") != contentType || rec.Body.Len() == 0 {
			t.Errorf("GET %s: %d %q, %d bytes; want 200 %q", path, rec.Code, hdr.Get("Content-Type"), rec.Body.Len(), contentType)
		}
		if hdr.Get("Content-Security-Policy") != ui.ContentSecurityPolicy || hdr.Get("X-Content-Type-Options") != "nosniff" ||
			hdr.Get("Referrer-Policy") != "no-referrer" || hdr.Get("Cache-Control") != "no-cache" || hdr.Get("ETag") == "" {
			t.Errorf("GET %s: headers %v, want the page's", path, hdr)
		}
		again := httptest.NewRequest(http.MethodGet, path, nil)
		again.Header.Set("If-None-Match", hdr.Get("ETag"))
		cached := httptest.NewRecorder()
		h.ServeHTTP(cached, again)
		if cached.Code != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", path, cached.Code)
		}
	}
	for path, want := range map[string]int{"/v1/status": http.StatusOK, "/ui/other.js": http.StatusNotFound, "/v1/audit": http.StatusNotFound} {
		if rec := get(t, h, path); rec.Code != want {
			t.Errorf("GET %s: %d, want %d", path, rec.Code, want)
		}
	}
	if rec := get(t, h, "/ui"); rec.Code != http.StatusTemporaryRedirect || rec.Header().Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d to %q, want a redirect to /ui/", rec.Code, rec.Header().Get("Location"))
	}
	if got := get(t, h, "/v1/status").Body.String(); got != "GET /v1/status" {
		t.Errorf("GET /v1/status: %q, want the API's answer", got)
	}
	want := []string{"GET /ui/{$}", "GET /ui/render.js", "GET /ui/app.js", "GET /ui/style.css", "GET /v1/status", "GET /v1/overrides"}
	if got := h.Routes(); !slices.Equal(got, want) {
		t.Errorf("Routes() = %q, want %q", got, want)
	}
}

// TestShell checks the page the server renders: nothing but the sign-in
// form shows, the sections whose routes the API does not serve say so,
// and there is no inline script or style for the policy to refuse.
func TestShell(t *testing.T) {
	h, err := ui.New(ui.Options{API: newAPI("GET /v1/status", "GET /v1/overrides")})
	if err != nil {
		t.Fatal(err)
	}
	page := get(t, h, "/ui/").Body.String()
	for _, want := range []string{
		`<form id="login-form" method="post" autocomplete="off">`,
		`<input id="token" type="password" required autofocus spellcheck="false" autocapitalize="off">`,
		`<div id="dashboard" hidden>`,
		`<section id="status" aria-labelledby="status-title" data-served>`,
		`<section id="overrides" aria-labelledby="overrides-title" data-served>`,
		`<script src="/ui/render.js" defer></script>`,
		`<script src="/ui/app.js" defer></script>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	for _, id := range []string{"rules", "history"} {
		section := regexp.MustCompile(`(?s)<section id="` + id + `"[^>]*>.*?</section>`).FindString(page)
		if strings.Contains(section, "data-served") || !strings.Contains(section, "Not available on this instance.") {
			t.Errorf("the %s section, whose route is not served:\n%s\nwant it to say it is not available", id, section)
		}
	}
	if inline := regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]|<script>|\sstyle=|\son[a-z]+=|<style`).FindString(page); inline != "" {
		t.Errorf("the page has inline script or style: %q", inline)
	}
	if strings.Contains(page, `id="token" name=`) {
		t.Error("the token's input has a name, which a form submission would send")
	}
}
