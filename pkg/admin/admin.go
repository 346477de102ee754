// Package admin serves tollgate's admin API: live overrides, what remains
// of a descriptor's limits, counter resets and the audit log, over HTTP
// with JSON, behind bearer tokens.
//
// The API is off unless a token is configured; httpapi then leaves its
// paths unserved, so they answer 404. Every call must carry
// "Authorization: Bearer <token>" with one of the tokens of Tokens, or it
// is answered 401 with WWW-Authenticate: Bearer. The token's name, never
// the token, is the actor that overrides (CreatedBy), the audit and the
// logs show.
//
// Routes:
//
//	POST   /v1/overrides        create an override: 201 with it
//	GET    /v1/overrides        the live overrides, ?domain= to filter
//	GET    /v1/overrides/{id}   one override, 404 if there is none
//	DELETE /v1/overrides/{id}   delete one: 200 with what was deleted
//	POST   /v1/remaining        the body of /v1/check, answered as it is, consuming nothing
//	POST   /v1/reset            the body of /v1/check: clear its counters
//	GET    /v1/audit            the newest audit entries, ?limit=N
//	GET    /v1/top              a domain's top clients; ?set=shadow: under the shadow rules
//	GET    /v1/rules            per rule its rates; ?set=shadow: under the shadow rules
//
// A remote address whose calls were refused ten times is answered 429,
// with Retry-After, until its refusals refill at one every 6 seconds,
// whatever token it presents: guessing tokens is slow. Refused calls are
// counted in tollgate_admin_refused_total by reason.
//
// Errors are JSON, {"error": "...", "status": "400"}, as /v1/check's are.
// A delete or a reset may give its reason as ?reason=, which the audit
// keeps.
//
// Descriptor values show in answers and in the audit as Options.Values
// says; calls take them as they are, so an override created with a plain
// value applies to it, and a reset of the plain value clears its counters,
// while the answers show its hash. Overrides are named by their ids, which
// are random and never derived from a value.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/tollgatehq/tollgate/pkg/audit"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/httpapi"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/record"
	"github.com/tollgatehq/tollgate/pkg/reload"
	"github.com/tollgatehq/tollgate/pkg/top"
)

// Overrides keeps the live overrides; *override.Registry is one. It
// validates what it is given against the live rules: a refusal wraps
// override.ErrInvalid with the reason, an unknown id override.ErrNotFound.
type Overrides interface {
	// Create stores o and returns it with its ID and CreatedAt.
	Create(ctx context.Context, o override.Override) (override.Override, error)
	// List returns the live overrides of domain, or of every domain for
	// "", oldest first.
	List(ctx context.Context, domain string) ([]override.Override, error)
	// Get returns the live override with the id.
	Get(ctx context.Context, id string) (override.Override, error)
	// Delete removes the override and returns it.
	Delete(ctx context.Context, id string) (override.Override, error)
}

// Resetter clears the counters a request's descriptors resolve to;
// *limiter.Limiter is one. An invalid request is an error wrapping
// limiter.ErrInvalidRequest.
type Resetter interface {
	Reset(ctx context.Context, req *limiter.Request) ([]limiter.ResetCounter, error)
}

// DefaultAuditLimit is how many audit entries GET /v1/audit answers
// without ?limit=.
const DefaultAuditLimit = 100

// Options configure the admin API. Every field but Now, MaxBodySize and
// Logger is required.
type Options struct {
	// Tokens authenticate every call.
	Tokens *Tokens
	// Overrides keeps the live overrides.
	Overrides Overrides
	// Limiter answers /v1/remaining, with every descriptor's cost 0.
	Limiter httpapi.Checker
	// Resetter answers /v1/reset.
	Resetter Resetter
	// Audit records every change made through the API, and answers
	// /v1/audit.
	Audit *audit.Log
	// Now turns an override's expires_in into its expiry; nil means
	// time.Now.
	Now func() time.Time
	// MaxBodySize bounds a request body; zero means 1 MiB.
	MaxBodySize int64
	// Logger receives refused calls and failures, with the token's name
	// and never the token. Nil discards.
	Logger *slog.Logger
	// Values is how answers and audit entries show descriptor values; the
	// zero value shows them as they are. The override registry is given
	// the same, for its refusals.
	Values descriptor.ValueView
	// MeterProvider gets tollgate_admin_refused_total; nil means a no-op.
	MeterProvider metric.MeterProvider
	// RuleHistory answers /v1/rules/history (reload.Reloader.History);
	// nil leaves that path unserved.
	RuleHistory func() []reload.Event
	// Status answers /v1/status; nil leaves that path unserved.
	Status func() Status
	// Top answers /v1/top and /v1/rules; nil (--top-capacity 0) leaves
	// those paths unserved.
	Top *top.Recorder
	// ShadowTop answers /v1/top?set=shadow and /v1/rules?set=shadow, for
	// the shadow rule set; nil (no --shadow-config-dir) answers them 404.
	ShadowTop *top.Recorder
	// Recorder answers /v1/record; nil (no --record-file) answers that
	// no recording can start.
	Recorder *record.Recorder
}

// Status is the answer of GET /v1/status: what the instance runs, and how
// its rules, store and fleet are.
type Status struct {
	Version string `json:"version"`
	// Store is memory or redis; Breaker the Redis circuit breaker's state
	// (closed, half-open, open); Degraded why decisions are made without
	// the store, when they are.
	Store    string `json:"store"`
	Breaker  string `json:"breaker,omitempty"`
	Degraded string `json:"degraded,omitempty"`
	// Fleet is the Redis pub/sub channel's state, with Redis.
	Fleet *FleetStatus `json:"fleet,omitempty"`
	Rules RulesStatus  `json:"rules"`
	// Overrides counts the live overrides.
	Overrides int `json:"overrides"`
	// Shadow is the shadow rule set's state, while there is one.
	Shadow *ShadowStatus `json:"shadow,omitempty"`
}

// ShadowStatus is the state of the shadow rule set (--shadow-config-dir).
type ShadowStatus struct {
	Rules RulesStatus `json:"rules"`
	// Decided counts the live calls decided again under the shadow
	// rules, Dropped those the queue to them had no room for.
	Decided int64 `json:"decided"`
	Dropped int64 `json:"dropped"`
}

// FleetStatus is the state of an instance's fleet channel.
type FleetStatus struct {
	// Subscribed is set while the instance hears the others' changes.
	Subscribed bool `json:"subscribed"`
}

// RulesStatus is the state of a rule set: the live rules, or the shadow
// ones.
type RulesStatus struct {
	Source   string    `json:"source"`
	Hash     string    `json:"hash,omitempty"`
	LoadedAt time.Time `json:"loaded_at,omitzero"`
	// LastError is the latest reload's error, while the previous rules
	// stay live.
	LastError string `json:"last_error,omitempty"`
	Reloads   uint64 `json:"reloads"`
	Failures  uint64 `json:"failures"`
}

// Handler serves the admin API.
type Handler struct {
	opts   Options
	mux    *http.ServeMux
	routes []string
	// refusals throttles the log of refused calls to one line a second,
	// which counts those left unlogged, so a client guessing tokens
	// cannot flood the log.
	refusals struct {
		sync.Mutex
		loggedAt   time.Time
		suppressed int
	}
	// throttle answers 429 to an address that spent its refused calls.
	throttle throttle
	// refusedTotal counts refused calls by reason.
	refusedTotal metric.Int64Counter
}

// meterName is the instrumentation scope of the admin API's metrics.
const meterName = "github.com/tollgatehq/tollgate/pkg/admin"

// The reasons of tollgate_admin_refused_total.
var (
	refusedNoToken      = metric.WithAttributes(attribute.String("reason", "no_token"))
	refusedUnknownToken = metric.WithAttributes(attribute.String("reason", "unknown_token"))
	refusedThrottled    = metric.WithAttributes(attribute.String("reason", "throttled"))
)

// New returns the admin API's handler. It fails when a required option is
// missing.
func New(opts Options) (*Handler, error) {
	var missing []string
	for name, absent := range map[string]bool{
		"Tokens": opts.Tokens == nil, "Overrides": opts.Overrides == nil, "Limiter": opts.Limiter == nil,
		"Resetter": opts.Resetter == nil, "Audit": opts.Audit == nil,
	} {
		if absent {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("admin: missing options %s", strings.Join(missing, ", "))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxBodySize <= 0 {
		opts.MaxBodySize = 1 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Logger = opts.Logger.With("component", "admin")
	if opts.MeterProvider == nil {
		opts.MeterProvider = noop.NewMeterProvider()
	}
	h := &Handler{opts: opts, mux: http.NewServeMux()}
	var err error
	if h.refusedTotal, err = opts.MeterProvider.Meter(meterName).Int64Counter("tollgate.admin.refused",
		metric.WithDescription("Admin calls refused, by reason: no bearer token, an unknown token, or too many refusals from the caller's address."),
		metric.WithUnit("{call}")); err != nil {
		return nil, err
	}
	h.handle("POST /v1/overrides", h.createOverride)
	h.handle("GET /v1/overrides", h.listOverrides)
	h.handle("GET /v1/overrides/{id}", h.getOverride)
	h.handle("DELETE /v1/overrides/{id}", h.deleteOverride)
	h.handle("POST /v1/remaining", h.remaining)
	h.handle("POST /v1/reset", h.reset)
	h.handle("GET /v1/audit", h.auditLog)
	h.handle("POST /v1/record", h.startRecording)
	h.handle("DELETE /v1/record", h.stopRecording)
	h.handle("GET /v1/record", h.recording)
	if opts.RuleHistory != nil {
		h.handle("GET /v1/rules/history", h.ruleHistory)
	}
	if opts.Top != nil {
		h.handle("GET /v1/top", h.topValues)
		h.handle("GET /v1/rules", h.ruleRatesOf)
	}
	if opts.Status != nil {
		h.handle("GET /v1/status", func(w http.ResponseWriter, _ *http.Request, _ string) {
			httpapi.WriteJSON(w, http.StatusOK, h.opts.Status())
		})
	}
	return h, nil
}

// handle serves pattern with fn, for authenticated callers only.
func (h *Handler) handle(pattern string, fn func(w http.ResponseWriter, r *http.Request, actor string)) {
	h.routes = append(h.routes, pattern)
	h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		host, now := remoteHost(r), h.opts.Now()
		if wait := h.throttle.wait(host, now); wait > 0 {
			h.refusedTotal.Add(r.Context(), 1, refusedThrottled)
			h.refused(r, "admin call refused: too many refused calls from its address")
			w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
			httpapi.WriteError(w, http.StatusTooManyRequests, "too many refused admin calls from this address")
			return
		}
		actor, ok := h.authenticate(r)
		if !ok {
			h.throttle.refused(host, now)
			w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate"`)
			httpapi.WriteError(w, http.StatusUnauthorized, "a valid admin bearer token is required")
			return
		}
		fn(w, r, actor)
	})
}

// Routes returns the http.ServeMux patterns the handler serves.
func (h *Handler) Routes() []string { return append([]string(nil), h.routes...) }

// ServeHTTP serves the admin API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// authenticate returns the name of the token r presents, if it is valid.
func (h *Handler) authenticate(r *http.Request) (string, bool) {
	scheme, presented, found := strings.Cut(r.Header.Get("Authorization"), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		h.refusedTotal.Add(r.Context(), 1, refusedNoToken)
		h.refused(r, "admin call without a bearer token refused")
		return "", false
	}
	name, ok := h.opts.Tokens.Authenticate(strings.TrimSpace(presented))
	if !ok {
		h.refusedTotal.Add(r.Context(), 1, refusedUnknownToken)
		h.refused(r, "admin call with an unknown token refused")
	}
	return name, ok
}

// refused logs a refused call, at most once a second.
func (h *Handler) refused(r *http.Request, msg string) {
	rf := &h.refusals
	rf.Lock()
	now := h.opts.Now()
	if now.Sub(rf.loggedAt) < time.Second {
		rf.suppressed++
		rf.Unlock()
		return
	}
	suppressed := rf.suppressed
	rf.loggedAt, rf.suppressed = now, 0
	rf.Unlock()
	h.opts.Logger.Warn(msg, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "unlogged_refusals", suppressed)
}

// CreateRequest is the body of POST /v1/overrides. Exactly one of Limit
// and Multiplier, and one of ExpiresIn (a Go duration such as "48h") and
// ExpiresAt (RFC 3339), must be set.
type CreateRequest struct {
	Domain     string             `json:"domain"`
	Entries    []descriptor.Entry `json:"entries"`
	Limit      *override.Limit    `json:"limit,omitempty"`
	Multiplier *float64           `json:"multiplier,omitempty"`
	ExpiresIn  *string            `json:"expires_in,omitempty"`
	ExpiresAt  *time.Time         `json:"expires_at,omitempty"`
	Reason     string             `json:"reason,omitempty"`
}

func (h *Handler) createOverride(w http.ResponseWriter, r *http.Request, actor string) {
	var in CreateRequest
	if err := h.decode(w, r, &in); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	o := override.Override{Domain: in.Domain, Entries: in.Entries, Limit: in.Limit, Reason: in.Reason, CreatedBy: actor}
	if in.Multiplier != nil {
		if *in.Multiplier <= 0 {
			httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("multiplier: must be greater than 0, got %v", *in.Multiplier))
			return
		}
		o.Multiplier = *in.Multiplier
	}
	switch {
	case in.ExpiresIn == nil && in.ExpiresAt == nil:
		httpapi.WriteError(w, http.StatusBadRequest, "expires_in or expires_at is required")
		return
	case in.ExpiresIn != nil && in.ExpiresAt != nil:
		httpapi.WriteError(w, http.StatusBadRequest, "expires_in and expires_at: give one, not both")
		return
	case in.ExpiresAt != nil:
		o.ExpiresAt = in.ExpiresAt.UTC()
	default:
		d, err := time.ParseDuration(*in.ExpiresIn)
		if err != nil {
			httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("expires_in: %v", err))
			return
		}
		if d <= 0 {
			httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("expires_in: must be positive, got %v", d))
			return
		}
		o.ExpiresAt = h.opts.Now().Add(d).UTC()
	}
	created, err := h.opts.Overrides.Create(r.Context(), o)
	if err != nil {
		h.fail(w, "creating an override", err)
		return
	}
	shown := h.show(created)
	h.opts.Audit.Record(r.Context(), audit.Entry{
		Actor: actor, Action: audit.ActionOverrideCreate, Target: created.ID, After: shown, Reason: created.Reason,
	})
	w.Header().Set("Location", "/v1/overrides/"+created.ID)
	httpapi.WriteJSON(w, http.StatusCreated, shown)
}

// overrideList is the answer of GET /v1/overrides.
type overrideList struct {
	Overrides []override.Override `json:"overrides"`
}

func (h *Handler) listOverrides(w http.ResponseWriter, r *http.Request, _ string) {
	list, err := h.opts.Overrides.List(r.Context(), r.URL.Query().Get("domain"))
	if err != nil {
		h.fail(w, "listing overrides", err)
		return
	}
	shown := make([]override.Override, len(list))
	for i, o := range list {
		shown[i] = h.show(o)
	}
	httpapi.WriteJSON(w, http.StatusOK, overrideList{Overrides: shown})
}

func (h *Handler) getOverride(w http.ResponseWriter, r *http.Request, _ string) {
	o, err := h.opts.Overrides.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		h.fail(w, "reading an override", err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, h.show(o))
}

func (h *Handler) deleteOverride(w http.ResponseWriter, r *http.Request, actor string) {
	o, err := h.opts.Overrides.Delete(override.WithActor(r.Context(), actor), r.PathValue("id"))
	if err != nil {
		h.fail(w, "deleting an override", err)
		return
	}
	shown := h.show(o)
	h.opts.Audit.Record(r.Context(), audit.Entry{
		Actor: actor, Action: audit.ActionOverrideDelete, Target: o.ID, Before: shown, Reason: r.URL.Query().Get("reason"),
	})
	httpapi.WriteJSON(w, http.StatusOK, shown)
}

// remaining answers the body of /v1/check as /v1/check would, with every
// descriptor checked at cost 0, so that nothing is consumed. Its code
// says whether one more hit would pass. It answers 200 even then: the
// call succeeded, whatever the limits say.
func (h *Handler) remaining(w http.ResponseWriter, r *http.Request, _ string) {
	req, err := httpapi.ReadCheckRequest(w, r, h.opts.MaxBodySize)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		d.Hits, d.HasHits, d.Refund = 0, true, false
	}
	req.Unrecorded = true // a question of the operator's, not traffic
	resp, err := h.opts.Limiter.Check(r.Context(), req)
	if err != nil {
		h.fail(w, "checking what remains", err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, httpapi.NewCheckResponse(resp))
}

// resetResponse is the answer of POST /v1/reset.
type resetResponse struct {
	Domain string         `json:"domain"`
	Reset  []resetCounter `json:"reset"`
}

// resetCounter is one counter a reset cleared.
type resetCounter struct {
	// Descriptor is the index of the request's descriptor.
	Descriptor int                `json:"descriptor"`
	Entries    []descriptor.Entry `json:"entries"`
	// Rule is the path of the rule the descriptor resolved to, or "" for
	// a counter no rule of the configuration holds.
	Rule  string         `json:"rule,omitempty"`
	Limit *httpapi.Limit `json:"limit,omitempty"`
}

func (h *Handler) reset(w http.ResponseWriter, r *http.Request, actor string) {
	req, err := httpapi.ReadCheckRequest(w, r, h.opts.MaxBodySize)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	counters, err := h.opts.Resetter.Reset(r.Context(), req)
	if err != nil {
		h.fail(w, "resetting counters", err)
		return
	}
	out := resetResponse{Domain: req.Domain, Reset: make([]resetCounter, len(counters))}
	for i, c := range counters {
		out.Reset[i] = resetCounter{Descriptor: c.Descriptor, Limit: httpapi.LimitJSON(c.Limit)}
		if c.Descriptor >= 0 && c.Descriptor < len(req.Descriptors) {
			out.Reset[i].Entries = append(out.Reset[i].Entries, h.opts.Values.ShowEntries(req.Descriptors[c.Descriptor].Entries)...)
		}
		if c.Rule != nil {
			out.Reset[i].Rule = c.Rule.Path
		}
	}
	h.opts.Audit.Record(r.Context(), audit.Entry{
		Actor: actor, Action: audit.ActionReset, Target: req.Domain, After: out, Reason: r.URL.Query().Get("reason"),
	})
	httpapi.WriteJSON(w, http.StatusOK, out)
}

// auditResponse is the answer of GET /v1/audit.
type auditResponse struct {
	Entries []audit.Entry `json:"entries"`
}

func (h *Handler) auditLog(w http.ResponseWriter, r *http.Request, _ string) {
	limit := DefaultAuditLimit
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("limit: want a positive number, got %q", s))
			return
		}
		limit = n
	}
	httpapi.WriteJSON(w, http.StatusOK, auditResponse{Entries: h.opts.Audit.Last(limit)})
}

// ruleHistory answers GET /v1/rules/history: the latest rule sets and
// failed reloads, newest first.
func (h *Handler) ruleHistory(w http.ResponseWriter, _ *http.Request, _ string) {
	httpapi.WriteJSON(w, http.StatusOK, struct {
		Entries []reload.Event `json:"entries"`
	}{h.opts.RuleHistory()})
}

// show returns o as answers and the audit show it: its descriptor values
// as Options.Values says.
func (h *Handler) show(o override.Override) override.Override {
	o.Entries = h.opts.Values.ShowEntries(o.Entries)
	return o
}

// decode decodes the JSON body of r into v, strictly: an unknown field or
// anything after the value is an error.
func (h *Handler) decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, h.opts.MaxBodySize))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding request body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("decoding request body: more than one JSON value")
	}
	return nil
}

// fail answers err, which happened while doing what: 400 for a refusal,
// 404 for an unknown override, 501 for a store that cannot reset, 503
// when the store is unavailable, else 500.
func (h *Handler) fail(w http.ResponseWriter, doing string, err error) {
	switch {
	case errors.Is(err, override.ErrInvalid), errors.Is(err, limiter.ErrInvalidRequest), errors.Is(err, top.ErrInvalidQuery):
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, override.ErrNotFound):
		httpapi.WriteError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, limiter.ErrCannotReset):
		httpapi.WriteError(w, http.StatusNotImplemented, doing+": "+err.Error())
	case errors.Is(err, limiter.ErrUnavailable), errors.Is(err, limiter.ErrNoRules):
		h.opts.Logger.Warn(doing+" failed", "error", err)
		httpapi.WriteError(w, http.StatusServiceUnavailable, doing+": "+err.Error())
	default:
		h.opts.Logger.Error(doing+" failed", "error", err)
		httpapi.WriteError(w, http.StatusInternalServerError, doing+": "+err.Error())
	}
}
