// Package ui serves tollgate's status page on the admin listener: an HTML
// shell rendered with html/template from embedded files, and a little
// plain JavaScript that reads and changes the instance through the admin
// API's JSON. There is no build step, nothing is fetched from another
// origin, and the page works offline.
//
// # What it guarantees
//
// The page holds no data. GET /ui/, its script and its style sheet are
// served without a token, and show nothing but a sign-in form. The token
// entered there is kept in the tab's sessionStorage (gone when the tab
// closes) and sent only in the Authorization header of the script's fetch
// calls to the admin API, which checks it as it checks every call: it is
// never put in a URL, a cookie or localStorage, and the input that takes
// it has no name, so that even a form submitted without the script carries
// nothing (the Content-Security-Policy also forbids form submissions).
//
// Every answer of the page carries a Content-Security-Policy that allows
// only this listener's own script, style sheet and API calls: no inline
// script, no other origin, no framing. The script builds the page from
// text nodes only (the policy requires Trusted Types, so assigning markup
// from a string would throw), so a descriptor value such as a client's API
// key is shown as text, never run.
//
// # What it does not
//
// It adds no authentication of its own and no session: a refused token
// signs the page out, and the admin API's throttle applies to the page as
// to any client. Over a plain HTTP admin listener the token crosses the
// network as every admin call's does; --admin-tls-cert protects both. Any
// script running in the page's origin could read sessionStorage, which is
// why the origin serves no other script.
//
// # Sections
//
// The page shows the instance's status (GET /v1/status), its rules with
// their rates and the top limited clients of each (GET /v1/rules, GET
// /v1/top), the live overrides, which it creates and deletes (GET, POST
// /v1/overrides, DELETE /v1/overrides/{id}), and the rule history (GET
// /v1/rules/history). A section whose route the API does not serve says
// so, as rendered on the server; one whose call answers 404 says the same.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tollgatehq/tollgate/pkg/admin"
)

// API is the handler the page sits beside on the admin listener, and whose
// routes it reads; *admin.Handler is one.
type API interface {
	http.Handler
	// Routes returns the http.ServeMux patterns the handler serves.
	Routes() []string
}

var _ API = (*admin.Handler)(nil)

// Options configure the status page.
type Options struct {
	// API serves every path of the listener but the page's own. Required.
	API API
}

// ContentSecurityPolicy is the policy of every answer of the page: only
// this origin's script, style sheet and API calls; no inline script or
// style, no plugins, no framing, no form submissions, and Trusted Types,
// so that no script assigns markup from a string.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'"

// PagePath is the page's path; its script and style sheet are beside it.
const PagePath = "/ui/"

// asset is a file of the page, served as it is.
type asset struct {
	// Name is its name in the page directory and under PagePath.
	Name, ContentType string
}

// assets are the page's script, in the order the page loads them, and
// its style sheet.
var assets = []asset{
	{"render.js", "text/javascript; charset=utf-8"},
	{"app.js", "text/javascript; charset=utf-8"},
	{"style.css", "text/css; charset=utf-8"},
}

//go:embed page
var files embed.FS

// section is one section of the page, as the shell renders it.
type section struct {
	// ID is the element's id, which the script finds it by.
	ID, Title string
	// Route is the admin API route the section reads first; Served is set
	// when the API serves it.
	Route  string
	Served bool
}

// Handler serves the status page, and the API for every other path.
type Handler struct {
	api    API
	mux    *http.ServeMux
	routes []string
}

// New returns the status page's handler. It fails when Options.API is
// missing.
func New(opts Options) (*Handler, error) {
	if opts.API == nil {
		return nil, fmt.Errorf("ui: missing option API")
	}
	h := &Handler{api: opts.API, mux: http.NewServeMux()}
	served := opts.API.Routes()
	sections := []section{
		{ID: "status", Title: "Status", Route: "GET /v1/status"},
		{ID: "rules", Title: "Rules", Route: "GET /v1/rules"},
		{ID: "overrides", Title: "Overrides", Route: "GET /v1/overrides"},
		{ID: "history", Title: "Rule history", Route: "GET /v1/rules/history"},
	}
	for i := range sections {
		sections[i].Served = slices.Contains(served, sections[i].Route)
	}
	tmpl, err := template.ParseFS(files, "page/index.html")
	if err != nil {
		return nil, fmt.Errorf("ui: parsing the page: %w", err)
	}
	var scripts, styles []string
	for _, a := range assets {
		if strings.HasSuffix(a.Name, ".js") {
			scripts = append(scripts, PagePath+a.Name)
		} else {
			styles = append(styles, PagePath+a.Name)
		}
	}
	var page bytes.Buffer
	if err := tmpl.Execute(&page, struct {
		Scripts, Styles []string
		Sections        []section
	}{scripts, styles, sections}); err != nil {
		return nil, fmt.Errorf("ui: rendering the page: %w", err)
	}
	h.handle("GET "+PagePath+"{$}", "text/html; charset=utf-8", page.Bytes())
	for _, a := range assets {
		body, err := files.ReadFile("page/" + a.Name)
		if err != nil {
			return nil, fmt.Errorf("ui: %w", err)
		}
		h.handle("GET "+PagePath+a.Name, a.ContentType, body)
	}
	h.mux.Handle("/", opts.API)
	return h, nil
}

// handle serves body as contentType at pattern, with the page's headers.
func (h *Handler) handle(pattern, contentType string, body []byte) {
	h.routes = append(h.routes, pattern)
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:8]) + `"`
	h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		hdr.Set("Content-Type", contentType)
		hdr.Set("Content-Security-Policy", ContentSecurityPolicy)
		hdr.Set("X-Content-Type-Options", "nosniff")
		hdr.Set("Referrer-Policy", "no-referrer")
		hdr.Set("Cross-Origin-Opener-Policy", "same-origin")
		hdr.Set("Cross-Origin-Resource-Policy", "same-origin")
		// Small files, revalidated on every load (by their ETag), so that
		// a new version of tollgate is never run with an old script.
		hdr.Set("Cache-Control", "no-cache")
		hdr.Set("ETag", etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	})
}

// Routes returns the http.ServeMux patterns h serves: the page's, then the
// API's.
func (h *Handler) Routes() []string { return slices.Concat(h.routes, h.api.Routes()) }

// ServeHTTP serves the page, its scripts and its style sheet, and passes
// every other request to the API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }
