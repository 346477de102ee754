package admin

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tollgatehq/tollgate/pkg/audit"
	"github.com/tollgatehq/tollgate/pkg/httpapi"
	"github.com/tollgatehq/tollgate/pkg/record"
)

// RecordRequest is the body of POST /v1/record.
type RecordRequest struct {
	// Duration is how long to record, as Go writes durations ("10m").
	Duration string `json:"duration"`
	// Sample is the share of clients recorded; absent means
	// --record-sample.
	Sample *float64 `json:"sample,omitempty"`
	Reason string   `json:"reason,omitempty"`
}

// startRecording answers POST /v1/record: it starts a recording for a
// span into --record-file, and audits it.
func (h *Handler) startRecording(w http.ResponseWriter, r *http.Request, actor string) {
	var in RecordRequest
	if err := h.decode(w, r, &in); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	d, err := time.ParseDuration(in.Duration)
	if err != nil || d <= 0 {
		httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("duration: want a positive duration such as \"10m\", got %q", in.Duration))
		return
	}
	span := record.Span{Duration: d}
	if in.Sample != nil {
		if !(*in.Sample > 0 && *in.Sample <= 1) {
			httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("sample: must be in (0, 1], got %v", *in.Sample))
			return
		}
		span.Sample = *in.Sample
	}
	if h.opts.Recorder == nil {
		h.recordFailed(w, record.ErrNoFile)
		return
	}
	if err := h.opts.Recorder.Start(span); err != nil {
		h.recordFailed(w, err)
		return
	}
	st := h.opts.Recorder.Status()
	h.opts.Audit.Record(r.Context(), audit.Entry{
		Actor: actor, Action: audit.ActionRecordStart, Target: st.File, After: st, Reason: in.Reason,
	})
	httpapi.WriteJSON(w, http.StatusCreated, st)
}

// stopRecording answers DELETE /v1/record: it stops the recording that
// is on, once its lines are written, and audits it.
func (h *Handler) stopRecording(w http.ResponseWriter, r *http.Request, actor string) {
	if h.opts.Recorder == nil {
		h.recordFailed(w, record.ErrNotRecording)
		return
	}
	st, err := h.opts.Recorder.Stop()
	if err != nil {
		h.recordFailed(w, err)
		return
	}
	h.opts.Audit.Record(r.Context(), audit.Entry{
		Actor: actor, Action: audit.ActionRecordStop, Target: st.File, Before: st, Reason: r.URL.Query().Get("reason"),
	})
	httpapi.WriteJSON(w, http.StatusOK, st)
}

// recording answers GET /v1/record: the recording that is on, else the
// last one, marked off.
func (h *Handler) recording(w http.ResponseWriter, _ *http.Request, _ string) {
	var st record.Status
	if h.opts.Recorder != nil {
		st = h.opts.Recorder.Status()
	}
	httpapi.WriteJSON(w, http.StatusOK, st)
}

// recordFailed answers an error of the recorder: 400 without a file or
// for an invalid span, 409 while one is on, 404 when none is, else 500.
func (h *Handler) recordFailed(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, record.ErrNoFile), errors.Is(err, record.ErrInvalid):
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, record.ErrRecording):
		httpapi.WriteError(w, http.StatusConflict, err.Error())
	case errors.Is(err, record.ErrNotRecording):
		httpapi.WriteError(w, http.StatusNotFound, err.Error())
	default:
		h.opts.Logger.Error("recording failed", "error", err)
		httpapi.WriteError(w, http.StatusInternalServerError, "recording: "+err.Error())
	}
}
