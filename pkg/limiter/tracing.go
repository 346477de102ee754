package limiter

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// tracerName is the instrumentation scope of the engine's spans.
const tracerName = "github.com/tollgatehq/tollgate/pkg/limiter"

// The span names: one decision, and each store call it makes.
const (
	checkSpanName = "limiter.Check"
	storeSpanName = "store.Apply"
)

// The span attributes. Like the metrics' attributes they name the
// configuration (domain, rule paths, limit names), never a request's
// descriptor values, which may be credentials. The per-descriptor ones are
// lists in request order.
const (
	attrDomain       attribute.Key = "tollgate.domain"
	attrDescriptors  attribute.Key = "tollgate.descriptors"   // number of descriptors
	attrCode         attribute.Key = "tollgate.code"          // OK or OVER_LIMIT
	attrRules        attribute.Key = "tollgate.rules"         // rule path per descriptor, "" when none matched
	attrLimits       attribute.Key = "tollgate.limits"        // name of the reported limit per descriptor
	attrResults      attribute.Key = "tollgate.results"       // metrics result per descriptor, such as "ok"
	attrDegraded     attribute.Key = "tollgate.degraded"      // answered without the store
	attrFailureModes attribute.Key = "tollgate.failure_modes" // per descriptor, "" when the store decided it
	attrStore        attribute.Key = "tollgate.store"         // "primary" or "fallback"
	attrHits         attribute.Key = "tollgate.hits"          // hits in the store batch
)

// checkTrace gathers what the decision span reports. It exists only while
// tracing, so an untraced Check pays one nil test per descriptor.
type checkTrace struct {
	span      trace.Span
	recording bool
	degraded  bool
	rules     []string
	limits    []string
	results   []string
	modes     []string
}

// startCheck starts the decision span of req.
func (l *Limiter) startCheck(ctx context.Context, req *Request) (context.Context, *checkTrace) {
	ctx, span := l.tracer.Start(ctx, checkSpanName, trace.WithAttributes(
		attrDomain.String(req.Domain),
		attrDescriptors.Int(len(req.Descriptors)),
	))
	tr := &checkTrace{span: span, recording: span.IsRecording()}
	if tr.recording {
		n := len(req.Descriptors)
		tr.rules = make([]string, 0, n)
		tr.limits = make([]string, 0, n)
		tr.results = make([]string, 0, n)
		tr.modes = make([]string, 0, n)
	}
	return ctx, tr
}

// record notes how st was decided: reported against lim (nil when no
// limit applies) with result r, by its failure mode when storeFailed.
func (tr *checkTrace) record(l *Limiter, st *descState, lim *descriptor.Limit, r result, storeFailed bool) {
	if !tr.recording {
		return
	}
	rule, name, mode := "", "", ""
	if st.rule != nil {
		rule = st.rule.Path
	}
	switch {
	case st.override:
		name = overrideLimit
	case lim != nil:
		name = lim.Name
	}
	if storeFailed && st.kind == kindCounted {
		tr.degraded = true
		mode = l.failureMode(st).String()
	}
	tr.rules = append(tr.rules, rule)
	tr.limits = append(tr.limits, name)
	tr.results = append(tr.results, resultNames[r])
	tr.modes = append(tr.modes, mode)
}

// end ends the decision span with the answer or the error.
func (tr *checkTrace) end(resp *Response, err error) {
	defer tr.span.End()
	if !tr.recording {
		return
	}
	if err != nil {
		setError(tr.span, err)
		return
	}
	attrs := []attribute.KeyValue{attrCode.String(resp.Code.String()), attrDegraded.Bool(tr.degraded)}
	if len(tr.results) > 0 {
		attrs = append(attrs,
			attrRules.StringSlice(tr.rules),
			attrLimits.StringSlice(tr.limits),
			attrResults.StringSlice(tr.results))
	}
	if tr.degraded {
		attrs = append(attrs, attrFailureModes.StringSlice(tr.modes))
	}
	tr.span.SetAttributes(attrs...)
}

// storeApply calls st.Apply, within a span when tracing; which names the
// store in the span.
func (l *Limiter) storeApply(ctx context.Context, st store.Store, which string, hits []store.Hit, verdicts []algorithm.Verdict) error {
	if l.tracer == nil {
		return st.Apply(ctx, hits, verdicts)
	}
	ctx, span := l.tracer.Start(ctx, storeSpanName, trace.WithAttributes(
		attrStore.String(which),
		attrHits.Int(len(hits)),
	))
	defer span.End()
	err := st.Apply(ctx, hits, verdicts)
	if err != nil {
		setError(span, err)
	}
	return err
}

// setError marks span failed with the class of err. The error's text is
// left out: a store's error may quote what it was sent.
func setError(span trace.Span, err error) {
	class := errorClass(err)
	span.SetStatus(codes.Error, class)
	span.SetAttributes(semconv.ErrorTypeKey.String(class))
}

// errorClass names the kind of err for a span.
func errorClass(err error) string {
	switch {
	case errors.Is(err, ErrInvalidRequest):
		return "invalid_request"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, store.ErrUnavailable):
		return "store_unavailable"
	}
	return semconv.ErrorTypeOther.Value.AsString()
}
