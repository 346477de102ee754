// Package httpapi serves tollgate over HTTP: a friendly JSON check
// (POST /v1/check), envoyproxy/ratelimit's POST /json, health and readiness
// probes and Prometheus metrics. The admin API has a listener of its own.
//
// The JSON of the check is exported (ReadCheckRequest, NewCheckResponse)
// so that the admin API's /v1/remaining and /v1/reset read and answer
// exactly what /v1/check does.
package httpapi

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

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
)

// Checker decides rate-limit requests; *limiter.Limiter is one.
type Checker interface {
	Check(ctx context.Context, req *limiter.Request) (*limiter.Response, error)
}

// Options configure the HTTP handler. Limiter is required; a nil JSON or
// Metrics handler leaves that path unserved, and a nil Ready is always ready.
type Options struct {
	// Limiter decides requests, and checks them: a request it rejects as
	// malformed or beyond its bounds (limiter.ErrInvalidRequest) is
	// answered 400 with the reason.
	Limiter Checker
	JSON    http.Handler // envoyproxy/ratelimit's POST /json
	Metrics http.Handler // GET /metrics
	Ready   func() error
	// Degraded returns why a ready service answers without its store, or
	// ""; /readyz reports it and stays 200. Nil is never degraded.
	Degraded func() string
	// AdminRoutes are the admin API's patterns, which this listener
	// answers 404 with a pointer to the admin listener (--admin-addr),
	// for a caller who has not learnt that the API moved there.
	AdminRoutes []string
	MaxBodySize int64 // default 1 MiB
	Logger      *slog.Logger
	// Untrusted marks /v1/check's callers as a source that may not charge
	// always or refund (limiter.Request.Untrusted): its "charge" and
	// "refund" are answered 400.
	Untrusted bool
}

// Handler is the HTTP API.
type Handler struct {
	opts   Options
	mux    *http.ServeMux
	routes []string
}

// New returns the HTTP handler.
func New(opts Options) *Handler {
	if opts.MaxBodySize <= 0 {
		opts.MaxBodySize = 1 << 20
	}
	if opts.Ready == nil {
		opts.Ready = func() error { return nil }
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Logger = opts.Logger.With("component", "http")
	h := &Handler{opts: opts, mux: http.NewServeMux()}
	h.handle("POST /v1/check", http.HandlerFunc(h.check))
	if opts.JSON != nil {
		h.handle("POST /json", http.MaxBytesHandler(opts.JSON, opts.MaxBodySize))
	}
	if opts.Metrics != nil {
		h.handle("GET /metrics", opts.Metrics)
	}
	h.handle("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }))
	h.handle("GET /readyz", http.HandlerFunc(h.ready))
	h.handle("GET /healthcheck", http.HandlerFunc(h.ready)) // envoyproxy/ratelimit's path
	for _, pattern := range opts.AdminRoutes {
		h.handle(pattern, http.HandlerFunc(adminElsewhere))
	}
	return h
}

// adminElsewhere answers a call of the admin API on the public listener.
func adminElsewhere(w http.ResponseWriter, _ *http.Request) {
	WriteError(w, http.StatusNotFound, "the admin API is served on its own listener (--admin-addr, 127.0.0.1:8082 by default), not here")
}

func (h *Handler) handle(pattern string, handler http.Handler) {
	h.mux.Handle(pattern, handler)
	h.routes = append(h.routes, pattern)
}

// ServeHTTP serves the API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Routes returns the http.ServeMux pattern of every route h serves, such
// as "POST /v1/check", in the order they were added.
func (h *Handler) Routes() []string { return slices.Clone(h.routes) }

func (h *Handler) ready(w http.ResponseWriter, _ *http.Request) {
	if err := h.opts.Ready(); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if h.opts.Degraded != nil {
		if why := h.opts.Degraded(); why != "" {
			_, _ = io.WriteString(w, "OK, degraded: "+why+"\n")
			return
		}
	}
	_, _ = io.WriteString(w, "OK\n")
}

// checkRequest is the body of POST /v1/check.
type checkRequest struct {
	Domain      string            `json:"domain"`
	Descriptors []checkDescriptor `json:"descriptors"`
	Hits        uint32            `json:"hits,omitempty"`
}

type checkDescriptor struct {
	Entries []descriptor.Entry `json:"entries"`
	// Hits is the descriptor's own hits_addend: 0 checks without counting.
	Hits   *uint64 `json:"hits,omitempty"`
	Refund bool    `json:"refund,omitempty"`
	// Charge "always" charges the descriptor's cost whatever the answer:
	// the descriptor gets the entry limiter.ChargeKey=always, so the
	// engine decides it exactly as a gRPC descriptor carrying that entry.
	// Any other value is an error; absent, the limits' charges apply.
	Charge *string `json:"charge,omitempty"`
}

// CheckResponse is the answer of POST /v1/check.
type CheckResponse struct {
	Code              string            `json:"code"`
	Allowed           bool              `json:"allowed"`
	RetryAfterSeconds int64             `json:"retry_after_seconds,omitempty"`
	Statuses          []CheckStatus     `json:"statuses"`
	Headers           map[string]string `json:"headers,omitempty"`
}

// CheckStatus is the answer for one descriptor of a CheckResponse.
type CheckStatus struct {
	Code              string  `json:"code"`
	Limit             *Limit  `json:"limit,omitempty"`
	Remaining         *uint32 `json:"remaining,omitempty"`
	ResetAfterSeconds float64 `json:"reset_after_seconds,omitempty"`
	RetryAfterSeconds int64   `json:"retry_after_seconds,omitempty"`
	// Penalized marks a rejection by a penalty's cooldown; Never one that
	// no wait would change (the cost exceeds the limit's capacity).
	Penalized bool `json:"penalized,omitempty"`
	Never     bool `json:"never,omitempty"`
}

// Limit is a counted limit as the API shows it.
type Limit struct {
	Name            string `json:"name,omitempty"`
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit"`
	UnitMultiplier  uint32 `json:"unit_multiplier,omitempty"`
	Algorithm       string `json:"algorithm"`
}

func (h *Handler) check(w http.ResponseWriter, r *http.Request) {
	req, err := ReadCheckRequest(w, r, h.opts.MaxBodySize)
	if err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	req.Untrusted = h.opts.Untrusted
	resp, err := h.opts.Limiter.Check(r.Context(), req)
	if errors.Is(err, limiter.ErrInvalidRequest) {
		WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		if !errors.Is(err, limiter.ErrNoRules) { // /readyz says so already
			h.opts.Logger.Warn("check failed", "domain", req.Domain, "error", err)
		}
		WriteError(w, http.StatusServiceUnavailable, "rate limit decision failed: "+err.Error())
		return
	}
	out := NewCheckResponse(resp)
	for _, hd := range resp.Headers {
		if hd.Key != "content-type" {
			w.Header().Set(hd.Key, hd.Value)
		}
	}
	status := http.StatusOK
	if !out.Allowed {
		status = http.StatusTooManyRequests
	}
	WriteJSON(w, status, out)
}

// ReadCheckRequest decodes the body of r, the JSON of POST /v1/check, into a
// limiter request. Decoding is strict: an unknown field is an error. The
// body is bounded by maxBody bytes. A non-nil error is the reason to answer
// 400 with.
func ReadCheckRequest(w http.ResponseWriter, r *http.Request, maxBody int64) (*limiter.Request, error) {
	var in checkRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("decoding request body: %w", err)
	}
	req := &limiter.Request{Domain: in.Domain, Hits: in.Hits, Descriptors: make([]limiter.Descriptor, len(in.Descriptors))}
	for i, d := range in.Descriptors {
		if d.Charge != nil {
			if *d.Charge != limiter.ChargeAlwaysValue {
				return nil, fmt.Errorf("descriptors[%d].charge: must be %q, got %q", i, limiter.ChargeAlwaysValue, *d.Charge)
			}
			d.Entries = append(d.Entries, descriptor.Entry{Key: limiter.ChargeKey, Value: limiter.ChargeAlwaysValue})
		}
		req.Descriptors[i] = limiter.Descriptor{Entries: d.Entries, Refund: d.Refund}
		if d.Hits != nil {
			req.Descriptors[i].Hits, req.Descriptors[i].HasHits = *d.Hits, true
		}
	}
	return req, nil
}

// NewCheckResponse returns the JSON answer of POST /v1/check for resp.
func NewCheckResponse(resp *limiter.Response) CheckResponse {
	out := CheckResponse{Allowed: resp.Code != limiter.OverLimit, Code: codeName(resp.Code), Statuses: make([]CheckStatus, len(resp.Statuses))}
	for i, st := range resp.Statuses {
		out.Statuses[i] = statusJSON(st)
		out.RetryAfterSeconds = max(out.RetryAfterSeconds, out.Statuses[i].RetryAfterSeconds)
	}
	if len(resp.Headers) > 0 {
		out.Headers = make(map[string]string, len(resp.Headers))
		for _, hd := range resp.Headers {
			out.Headers[hd.Key] = hd.Value
		}
	}
	return out
}

func statusJSON(st limiter.Status) CheckStatus {
	out := CheckStatus{Code: codeName(st.Code), Limit: LimitJSON(st.Limit), Penalized: st.Penalized, Never: st.Never}
	if st.Limit != nil || st.Remaining == math.MaxUint32 {
		remaining := st.Remaining
		out.Remaining = &remaining
	}
	out.ResetAfterSeconds = st.ResetAfter.Seconds()
	if st.RetryAfter > 0 {
		out.RetryAfterSeconds = int64(math.Ceil(st.RetryAfter.Seconds()))
	}
	return out
}

// LimitJSON returns l as the API shows it; nil for nil.
func LimitJSON(l *descriptor.Limit) *Limit {
	if l == nil {
		return nil
	}
	out := &Limit{
		Name:            l.Name,
		RequestsPerUnit: l.RequestsPerUnit,
		Unit:            l.Unit.String(),
		Algorithm:       l.Algorithm.String(),
	}
	if l.UnitMultiplier > 1 {
		out.UnitMultiplier = l.UnitMultiplier
	}
	return out
}

func codeName(c limiter.Code) string {
	if c == limiter.OverLimit {
		return "OVER_LIMIT"
	}
	return "OK"
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError answers status with the API's JSON error,
// {"error": msg, "status": "400"}.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, map[string]string{"error": msg, "status": strconv.Itoa(status)})
}
