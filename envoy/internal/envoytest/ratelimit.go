package envoytest

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// FilterName is the name under which Envoy finds the HTTP rate-limit
// filter's per-route configuration.
const FilterName = "envoy.filters.http.ratelimit"

// ErrUnsupported reports configuration that this package does not model,
// so that a test fails instead of computing a wrong answer.
var ErrUnsupported = errors.New("not modelled by envoytest")

// Request is what a downstream client sends, as far as routing and
// rate-limit actions look at it.
type Request struct {
	// Path is the :path header, query string included.
	Path string
	// Method is the :method header; empty means GET.
	Method string
	// Headers holds request headers by lower-case name.
	Headers map[string]string
	// RemoteAddress is the downstream peer's IP address; empty means none
	// (a Unix socket peer, say).
	RemoteAddress string
}

// header returns a request header or pseudo-header as Envoy's header map
// would, and whether it is present.
func (r Request) header(name string) (string, bool) {
	switch name = strings.ToLower(name); name {
	case ":path":
		return r.Path, r.Path != ""
	case ":method":
		if r.Method == "" {
			return "GET", true
		}
		return r.Method, true
	}
	v, ok := r.Headers[name]
	return v, ok
}

// pathOnly is the :path without its query string, as route matching sees it.
func (r Request) pathOnly() string {
	p, _, _ := strings.Cut(r.Path, "?")
	return p
}

// Call is what the rate-limit filter sends in one call to the service: the
// domain and the descriptors, in order, each with the hits_addend of the
// rate_limits entry that made it (nil when the entry sets none). A Call
// without descriptors means the filter does not call the service at all.
type Call struct {
	Domain      string
	Descriptors [][]descriptor.Entry
	Hits        []*routev3.RateLimit_HitsAddend
}

// Phase says which call of the filter a rate_limits entry takes part in.
type Phase int

const (
	// OnRequest is the call made before the request goes upstream, whose
	// answer admits or rejects it: entries without apply_on_stream_done.
	OnRequest Phase = iota
	// OnStreamDone is the call made once the stream is complete, whose
	// answer Envoy ignores: entries with apply_on_stream_done (Envoy 1.33).
	OnStreamDone
)

// Route picks the route of vh that Envoy would choose for req: the first
// whose match accepts it. It returns nil when none does.
func Route(vh *routev3.VirtualHost, req Request) (*routev3.Route, error) {
	for _, rt := range vh.GetRoutes() {
		ok, err := routeMatches(rt.GetMatch(), req)
		if err != nil {
			return nil, fmt.Errorf("route %q: %w", rt.GetName(), err)
		}
		if ok {
			return rt, nil
		}
	}
	return nil, nil
}

func routeMatches(m *routev3.RouteMatch, req Request) (bool, error) {
	if m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue() {
		return false, fmt.Errorf("case-insensitive route match: %w", ErrUnsupported)
	}
	if len(m.GetQueryParameters()) > 0 || m.GetGrpc() != nil || m.GetTlsContext() != nil ||
		len(m.GetDynamicMetadata()) > 0 || m.GetRuntimeFraction() != nil || m.GetFilterState() != nil {
		return false, fmt.Errorf("route match on more than path and headers: %w", ErrUnsupported)
	}
	path := req.pathOnly()
	var ok bool
	switch spec := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		ok = strings.HasPrefix(path, spec.Prefix)
	case *routev3.RouteMatch_Path:
		ok = path == spec.Path
	case *routev3.RouteMatch_PathSeparatedPrefix:
		ok = path == spec.PathSeparatedPrefix || strings.HasPrefix(path, spec.PathSeparatedPrefix+"/")
	default:
		return false, fmt.Errorf("path specifier %T: %w", spec, ErrUnsupported)
	}
	if !ok {
		return false, nil
	}
	return headersMatch(m.GetHeaders(), req)
}

// headersMatch reports whether every matcher accepts req, as Envoy's
// HeaderUtility::matchHeaders does.
func headersMatch(matchers []*routev3.HeaderMatcher, req Request) (bool, error) {
	for _, hm := range matchers {
		ok, err := headerMatches(hm, req)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func headerMatches(hm *routev3.HeaderMatcher, req Request) (bool, error) {
	v, present := req.header(hm.GetName())
	presentSpec, isPresent := hm.GetHeaderMatchSpecifier().(*routev3.HeaderMatcher_PresentMatch)
	if !present && !hm.GetTreatMissingHeaderAsEmpty() {
		// A missing header matches only present_match: false, or
		// present_match: true inverted.
		return isPresent && presentSpec.PresentMatch == hm.GetInvertMatch(), nil
	}
	var ok bool
	switch spec := hm.GetHeaderMatchSpecifier().(type) {
	case nil:
		ok = true
	case *routev3.HeaderMatcher_PresentMatch:
		ok = spec.PresentMatch
	case *routev3.HeaderMatcher_StringMatch:
		m, err := stringMatches(spec.StringMatch, v)
		if err != nil {
			return false, err
		}
		ok = m
	case *routev3.HeaderMatcher_ExactMatch:
		ok = v == spec.ExactMatch
	case *routev3.HeaderMatcher_PrefixMatch:
		ok = strings.HasPrefix(v, spec.PrefixMatch)
	case *routev3.HeaderMatcher_SuffixMatch:
		ok = strings.HasSuffix(v, spec.SuffixMatch)
	case *routev3.HeaderMatcher_ContainsMatch:
		ok = strings.Contains(v, spec.ContainsMatch)
	default:
		return false, fmt.Errorf("header matcher %T: %w", spec, ErrUnsupported)
	}
	return ok != hm.GetInvertMatch(), nil
}

func stringMatches(m *matcherv3.StringMatcher, v string) (bool, error) {
	if m.GetIgnoreCase() {
		v = strings.ToLower(v)
	}
	fold := func(s string) string {
		if m.GetIgnoreCase() {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return v == fold(p.Exact), nil
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(v, fold(p.Prefix)), nil
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(v, fold(p.Suffix)), nil
	case *matcherv3.StringMatcher_Contains:
		return strings.Contains(v, fold(p.Contains)), nil
	case *matcherv3.StringMatcher_SafeRegex:
		// RE2 full match; Go's regexp is RE2 too.
		re, err := regexp.Compile(`^(?:` + p.SafeRegex.GetRegex() + `)$`)
		if err != nil {
			return false, fmt.Errorf("regex %q: %w", p.SafeRegex.GetRegex(), err)
		}
		return re.MatchString(v), nil
	default:
		return false, fmt.Errorf("string matcher %T: %w", p, ErrUnsupported)
	}
}

// PerRoute returns the rate-limit filter's per-route configuration of rt,
// or else of vh, or nil: the most specific one wins, as in Envoy.
func PerRoute(vh *routev3.VirtualHost, rt *routev3.Route) (*ratelimitv3.RateLimitPerRoute, error) {
	for _, cfg := range []*routev3.Route{rt, {TypedPerFilterConfig: vh.GetTypedPerFilterConfig()}} {
		a := cfg.GetTypedPerFilterConfig()[FilterName]
		if a == nil {
			continue
		}
		var pr ratelimitv3.RateLimitPerRoute
		if err := a.UnmarshalTo(&pr); err != nil {
			return nil, fmt.Errorf("%s per-route configuration: %w", FilterName, err)
		}
		return &pr, nil
	}
	return nil, nil
}

// RateLimitCall computes what filter sends for req on the virtual host
// vh before the request goes upstream: the route Envoy picks, the domain
// (the per-route one, else the filter's), and one descriptor per
// rate_limits entry whose actions all succeed. It follows Envoy's
// precedence: the per-route rate_limits, else the filter's own, else the
// route's; the virtual host's when the route has none (the default
// vh_rate_limits, OVERRIDE) or asks to include them.
func RateLimitCall(filter *ratelimitv3.RateLimit, vh *routev3.VirtualHost, req Request) (Call, error) {
	return rateLimitCall(filter, vh, req, OnRequest)
}

// StreamDoneCall computes, as RateLimitCall does, what filter sends for
// req once the stream is done: the descriptors of the entries with
// apply_on_stream_done.
func StreamDoneCall(filter *ratelimitv3.RateLimit, vh *routev3.VirtualHost, req Request) (Call, error) {
	return rateLimitCall(filter, vh, req, OnStreamDone)
}

func rateLimitCall(filter *ratelimitv3.RateLimit, vh *routev3.VirtualHost, req Request, phase Phase) (Call, error) {
	rt, err := Route(vh, req)
	if err != nil || rt == nil {
		return Call{}, err
	}
	action := rt.GetRoute()
	if action == nil {
		// Direct responses and redirects have no route entry: the filter
		// does nothing for them.
		return Call{}, nil
	}
	pr, err := PerRoute(vh, rt)
	if err != nil {
		return Call{}, err
	}
	call := Call{Domain: filter.GetDomain()}
	if pr.GetDomain() != "" {
		call.Domain = pr.GetDomain()
	}
	if filter.GetStage() != 0 {
		return Call{}, fmt.Errorf("filter stage %d: %w", filter.GetStage(), ErrUnsupported)
	}
	var limits []*routev3.RateLimit
	// Envoy reads hits_addend only in the rate_limits of the filter's
	// configuration (RateLimitPerRoute's or the filter's own), never in
	// a route's or a virtual host's.
	embedded := true
	switch {
	case len(pr.GetRateLimits()) > 0:
		limits = pr.GetRateLimits()
	case len(filter.GetRateLimits()) > 0:
		limits = filter.GetRateLimits()
	default:
		embedded = false
		opt := pr.GetVhRateLimits()
		includeVH := action.GetIncludeVhRateLimits().GetValue() || opt == ratelimitv3.RateLimitPerRoute_INCLUDE
		overrideVH := !includeVH && opt == ratelimitv3.RateLimitPerRoute_OVERRIDE && len(action.GetRateLimits()) == 0
		limits = append(limits, action.GetRateLimits()...)
		if includeVH || overrideVH {
			limits = append(limits, vh.GetRateLimits()...)
		}
	}
	call.Descriptors, call.Hits, err = descriptors(limits, req, phase, embedded)
	return call, err
}

// ErrIgnoredHitsAddend reports a hits_addend where Envoy does not read it:
// in a route's or a virtual host's rate_limits.
var ErrIgnoredHitsAddend = errors.New("hits_addend outside the rate-limit filter's configuration (RateLimitPerRoute.rate_limits or the filter's rate_limits): Envoy ignores it")

// Descriptors returns the descriptor that each of limits produces for
// req on the request path, in order, leaving out those with an action
// that fails (a missing header, a header match that does not hold), as
// Envoy does. Only stage-0 entries without apply_on_stream_done count:
// those are what a filter with the default stage sends before the request
// goes upstream. limits are a route's or a virtual host's, where a
// hits_addend is an error.
func Descriptors(limits []*routev3.RateLimit, req Request) ([][]descriptor.Entry, error) {
	out, _, err := descriptors(limits, req, OnRequest, false)
	return out, err
}

func descriptors(limits []*routev3.RateLimit, req Request, phase Phase, embedded bool) ([][]descriptor.Entry, []*routev3.RateLimit_HitsAddend, error) {
	var out [][]descriptor.Entry
	var hits []*routev3.RateLimit_HitsAddend
	for i, rl := range limits {
		if rl.GetDisableKey() != "" || rl.GetLimit() != nil {
			return nil, nil, fmt.Errorf("rate_limits[%d]: disable_key or limit: %w", i, ErrUnsupported)
		}
		if rl.GetHitsAddend() != nil && !embedded {
			return nil, nil, fmt.Errorf("rate_limits[%d]: %w", i, ErrIgnoredHitsAddend)
		}
		if rl.GetStage().GetValue() != 0 || rl.GetApplyOnStreamDone() != (phase == OnStreamDone) {
			continue
		}
		entries, ok, err := actionsEntries(rl.GetActions(), req)
		if err != nil {
			return nil, nil, fmt.Errorf("rate_limits[%d]: %w", i, err)
		}
		if ok {
			out = append(out, entries)
			hits = append(hits, rl.GetHitsAddend())
		}
	}
	return out, hits, nil
}

// actionsEntries applies actions in order; ok is false when one fails.
func actionsEntries(actions []*routev3.RateLimit_Action, req Request) (entries []descriptor.Entry, ok bool, err error) {
	entries = []descriptor.Entry{}
	for j, a := range actions {
		switch spec := a.GetActionSpecifier().(type) {
		case *routev3.RateLimit_Action_RequestHeaders_:
			rh := spec.RequestHeaders
			v, present := req.header(rh.GetHeaderName())
			if !present {
				if rh.GetSkipIfAbsent() {
					continue
				}
				return nil, false, nil
			}
			entries = append(entries, descriptor.Entry{Key: rh.GetDescriptorKey(), Value: v})
		case *routev3.RateLimit_Action_GenericKey_:
			gk := spec.GenericKey
			key := gk.GetDescriptorKey()
			if key == "" {
				key = "generic_key"
			}
			entries = append(entries, descriptor.Entry{Key: key, Value: gk.GetDescriptorValue()})
		case *routev3.RateLimit_Action_HeaderValueMatch_:
			hv := spec.HeaderValueMatch
			expect := hv.GetExpectMatch() == nil || hv.GetExpectMatch().GetValue()
			matched, err := headersMatch(hv.GetHeaders(), req)
			if err != nil {
				return nil, false, fmt.Errorf("actions[%d]: %w", j, err)
			}
			key := hv.GetDescriptorKey()
			if key == "" {
				key = "header_match"
			}
			switch {
			case matched == expect:
				entries = append(entries, descriptor.Entry{Key: key, Value: hv.GetDescriptorValue()})
			case hv.GetDefaultValue() != "":
				entries = append(entries, descriptor.Entry{Key: key, Value: hv.GetDefaultValue()})
			default:
				return nil, false, nil
			}
		case *routev3.RateLimit_Action_RemoteAddress_:
			addr, err := netip.ParseAddr(req.RemoteAddress)
			if err != nil {
				return nil, false, nil // not an IP peer: the action fails
			}
			entries = append(entries, descriptor.Entry{Key: "remote_address", Value: addr.String()})
		default:
			return nil, false, fmt.Errorf("actions[%d] %T: %w", j, spec, ErrUnsupported)
		}
	}
	return entries, true, nil
}

// String formats entries as the README does: [k=v, k2=v2].
func String(entries []descriptor.Entry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = e.Key + "=" + e.Value
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// HitsString formats a hits_addend as the README does: its number or its
// format string, after a "-" when it refunds (is_negative_hits); "" for
// none.
func HitsString(h *routev3.RateLimit_HitsAddend) string {
	if h == nil {
		return ""
	}
	s := h.GetFormat()
	if h.GetNumber() != nil {
		s = strconv.FormatUint(h.GetNumber().GetValue(), 10)
	}
	if h.GetIsNegativeHits() {
		s = "-" + s
	}
	return s
}
