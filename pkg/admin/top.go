package admin

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/httpapi"
	"github.com/tollgatehq/tollgate/pkg/top"
)

// MaxTopLimit bounds GET /v1/top's limit.
const MaxTopLimit = 1000

// topEntry is one entry of GET /v1/top.
type topEntry struct {
	top.RuleID
	Descriptor []descriptor.Entry `json:"descriptor"`
	Requests   uint64             `json:"requests"`
	Rejected   uint64             `json:"rejected"`
	// Error bounds how much the count the answer is sorted by overstates.
	Error uint64 `json:"error"`
}

// topAnswer is the answer of GET /v1/top.
type topAnswer struct {
	Window    string     `json:"window"`
	By        string     `json:"by"`
	Instances int        `json:"instances"`
	Partial   bool       `json:"partial,omitempty"`
	Entries   []topEntry `json:"entries"`
}

// topValues answers GET /v1/top: the busiest descriptor values of a
// domain's rules, by rejections or requests, merged over the fleet; with
// ?set=shadow, of the shadow rules, on this instance.
func (h *Handler) topValues(w http.ResponseWriter, r *http.Request, _ string) {
	rec, ok := h.topOf(w, r)
	if !ok {
		return
	}
	q, err := topQuery(r)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	ans, err := rec.Top(r.Context(), q)
	if err != nil {
		h.fail(w, "reading the top values", err)
		return
	}
	out := topAnswer{Window: ans.Window.String(), By: ans.By.String(), Instances: ans.Instances, Partial: ans.Partial,
		Entries: make([]topEntry, len(ans.Entries))}
	for i, e := range ans.Entries {
		out.Entries[i] = topEntry{RuleID: e.RuleID, Descriptor: h.opts.Values.ShowEntries(e.Descriptor),
			Requests: e.Requests, Rejected: e.Rejected, Error: e.Error}
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

// topOf returns the summaries that ?set= names: the live rules' (set
// absent or live) or the shadow rules' (shadow). It answers 400 for
// another set and 404 for the shadow set of an instance without one, and
// then returns false.
func (h *Handler) topOf(w http.ResponseWriter, r *http.Request) (*top.Recorder, bool) {
	switch set := r.URL.Query().Get("set"); set {
	case "", "live":
		return h.opts.Top, true
	case "shadow":
		if h.opts.ShadowTop == nil {
			httpapi.WriteError(w, http.StatusNotFound, "no shadow rule set on this instance (--shadow-config-dir)")
			return nil, false
		}
		return h.opts.ShadowTop, true
	default:
		httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("set: want live or shadow, got %q", set))
		return nil, false
	}
}

// topQuery reads the query of GET /v1/top; its errors wrap
// top.ErrInvalidQuery.
func topQuery(r *http.Request) (top.Query, error) {
	v := r.URL.Query()
	q := top.Query{Domain: v.Get("domain"), Rule: v.Get("rule")}
	var errs []error
	if q.Domain == "" {
		errs = append(errs, errors.New("domain: required"))
	}
	var err error
	if q.By, err = top.ParseBy(v.Get("by")); err != nil {
		errs = append(errs, fmt.Errorf("by: %w", err))
	}
	if q.Window, err = top.ParseWindow(v.Get("window")); err != nil {
		errs = append(errs, fmt.Errorf("window: %w", err))
	}
	if s := v.Get("limit"); s != "" {
		if q.Limit, err = strconv.Atoi(s); err != nil || q.Limit < 1 || q.Limit > MaxTopLimit {
			errs = append(errs, fmt.Errorf("limit: want a number from 1 to %d, got %q", MaxTopLimit, s))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return q, fmt.Errorf("%w: %w", top.ErrInvalidQuery, err)
	}
	return q, nil
}

// ruleRates is one rule identity of GET /v1/rules.
type ruleRates struct {
	top.RuleID
	// RequestsPerUnit and Unit are the limit's: a unit's name, or the
	// period as a Go duration when it is several units; both zero for an
	// override.
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit,omitempty"`
	// Decisions and rejections per second, weighted by hits.
	Decisions1m float64 `json:"decisions_per_second_1m"`
	Decisions5m float64 `json:"decisions_per_second_5m"`
	Rejected1m  float64 `json:"rejected_per_second_1m"`
	Rejected5m  float64 `json:"rejected_per_second_5m"`
	// Hottest is the value with the most hits in the last minute, and
	// HottestRatio its hits over what the limit allows in 60 s.
	Hottest      []descriptor.Entry `json:"hottest,omitempty"`
	HottestHits  float64            `json:"hottest_hits_per_minute"`
	HottestRatio float64            `json:"hottest_ratio"`
}

// rulesAnswer is the answer of GET /v1/rules.
type rulesAnswer struct {
	Instances int         `json:"instances"`
	Partial   bool        `json:"partial,omitempty"`
	Rules     []ruleRates `json:"rules"`
}

// ruleRatesOf answers GET /v1/rules: per rule identity its limit, its
// rates over 1 and 5 minutes, and its hottest value's share of the limit.
func (h *Handler) ruleRatesOf(w http.ResponseWriter, r *http.Request, _ string) {
	rec, ok := h.topOf(w, r)
	if !ok {
		return
	}
	v := r.URL.Query()
	ans := rec.Rules(r.Context(), top.RulesQuery{Domain: v.Get("domain"), Rule: v.Get("rule")})
	out := rulesAnswer{Instances: ans.Instances, Partial: ans.Partial, Rules: make([]ruleRates, len(ans.Rules))}
	for i, s := range ans.Rules {
		out.Rules[i] = ruleRates{
			RuleID: s.RuleID, RequestsPerUnit: s.RequestsPerUnit, Unit: unitName(s.Period),
			Decisions1m: s.Decisions1m, Decisions5m: s.Decisions5m, Rejected1m: s.Rejections1m, Rejected5m: s.Rejections5m,
			Hottest: h.opts.Values.ShowEntries(s.Hottest), HottestHits: s.HottestHits, HottestRatio: s.HottestRatio,
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

// unitName names period as a rule file would: "minute", or "5m0s" for
// several units; "" for none.
func unitName(period time.Duration) string {
	if period == 0 {
		return ""
	}
	for _, u := range []descriptor.Unit{descriptor.Second, descriptor.Minute, descriptor.Hour, descriptor.Day,
		descriptor.Week, descriptor.Month, descriptor.Year} {
		if u.Duration() == period {
			return u.String()
		}
	}
	return period.String()
}
