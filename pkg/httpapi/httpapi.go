// Package httpapi serves tollgate over HTTP: a friendly JSON check
// (POST /v1/check), envoyproxy/ratelimit's POST /json, health and readiness
// probes, and Prometheus metrics.
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
	Degraded    func() string
	MaxBodySize int64 // default 1 MiB
	Logger      *slog.Logger
}

type handler struct {
	opts Options
}

// New returns the HTTP handler.
func New(opts Options) http.Handler {
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
	h := &handler{opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", h.check)
	if opts.JSON != nil {
		mux.Handle("POST /json", http.MaxBytesHandler(opts.JSON, opts.MaxBodySize))
	}
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", h.ready)
	mux.HandleFunc("GET /healthcheck", h.ready) // envoyproxy/ratelimit's path
	return mux
}

func (h *handler) ready(w http.ResponseWriter, _ *http.Request) {
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

// checkResponse is the answer of POST /v1/check.
type checkResponse struct {
	Code              string            `json:"code"`
	Allowed           bool              `json:"allowed"`
	RetryAfterSeconds int64             `json:"retry_after_seconds,omitempty"`
	Statuses          []checkStatus     `json:"statuses"`
	Headers           map[string]string `json:"headers,omitempty"`
}

type checkStatus struct {
	Code              string      `json:"code"`
	Limit             *checkLimit `json:"limit,omitempty"`
	Remaining         *uint32     `json:"remaining,omitempty"`
	ResetAfterSeconds float64     `json:"reset_after_seconds,omitempty"`
	RetryAfterSeconds int64       `json:"retry_after_seconds,omitempty"`
}

type checkLimit struct {
	Name            string `json:"name,omitempty"`
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit"`
	UnitMultiplier  uint32 `json:"unit_multiplier,omitempty"`
	Algorithm       string `json:"algorithm"`
}

func (h *handler) check(w http.ResponseWriter, r *http.Request) {
	var in checkRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, h.opts.MaxBodySize))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("decoding request body: %v", err))
		return
	}
	req := &limiter.Request{Domain: in.Domain, Hits: in.Hits, Descriptors: make([]limiter.Descriptor, len(in.Descriptors))}
	for i, d := range in.Descriptors {
		if d.Charge != nil {
			if *d.Charge != limiter.ChargeAlwaysValue {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("descriptors[%d].charge: must be %q, got %q", i, limiter.ChargeAlwaysValue, *d.Charge))
				return
			}
			d.Entries = append(d.Entries, descriptor.Entry{Key: limiter.ChargeKey, Value: limiter.ChargeAlwaysValue})
		}
		req.Descriptors[i] = limiter.Descriptor{Entries: d.Entries, Refund: d.Refund}
		if d.Hits != nil {
			req.Descriptors[i].Hits, req.Descriptors[i].HasHits = *d.Hits, true
		}
	}
	resp, err := h.opts.Limiter.Check(r.Context(), req)
	if errors.Is(err, limiter.ErrInvalidRequest) {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		h.opts.Logger.Warn("check failed", "domain", in.Domain, "error", err)
		writeError(w, http.StatusServiceUnavailable, "rate limit decision failed: "+err.Error())
		return
	}
	out := checkResponse{Allowed: resp.Code != limiter.OverLimit, Code: codeName(resp.Code), Statuses: make([]checkStatus, len(resp.Statuses))}
	for i, st := range resp.Statuses {
		out.Statuses[i] = statusJSON(st)
		out.RetryAfterSeconds = max(out.RetryAfterSeconds, out.Statuses[i].RetryAfterSeconds)
	}
	if len(resp.Headers) > 0 {
		out.Headers = make(map[string]string, len(resp.Headers))
		for _, hd := range resp.Headers {
			out.Headers[hd.Key] = hd.Value
			if hd.Key != "content-type" {
				w.Header().Set(hd.Key, hd.Value)
			}
		}
	}
	status := http.StatusOK
	if !out.Allowed {
		status = http.StatusTooManyRequests
	}
	writeJSON(w, status, out)
}

func statusJSON(st limiter.Status) checkStatus {
	out := checkStatus{Code: codeName(st.Code)}
	if st.Limit != nil {
		out.Limit = &checkLimit{
			Name:            st.Limit.Name,
			RequestsPerUnit: st.Limit.RequestsPerUnit,
			Unit:            st.Limit.Unit.String(),
			Algorithm:       st.Limit.Algorithm.String(),
		}
		if st.Limit.UnitMultiplier > 1 {
			out.Limit.UnitMultiplier = st.Limit.UnitMultiplier
		}
	}
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

func codeName(c limiter.Code) string {
	if c == limiter.OverLimit {
		return "OVER_LIMIT"
	}
	return "OK"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg, "status": strconv.Itoa(status)})
}
