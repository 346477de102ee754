package limiter

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// Unlimited is the Remaining reported for unlimited and allow-listed
// descriptors, as envoyproxy/ratelimit reports it.
const Unlimited = math.MaxUint32

// ChargeKey is the key of the descriptor entry that marks a descriptor's
// hits as charged always (algorithm.ChargeAlways) whatever its rule says:
// a raw Envoy configuration adds it, with value ChargeAlwaysValue, to the
// descriptor of a report sent after the response. The entry is removed
// before matching and before the counter is named, so a marked descriptor
// names the same rule and counter as the descriptor without it.
const ChargeKey = "tollgate.charge"

// ChargeAlwaysValue is the one value a ChargeKey entry may have.
const ChargeAlwaysValue = "always"

// ErrInvalidRequest reports a request the engine cannot decide because it is
// malformed (no domain, no descriptors, a descriptor without entries, an
// entry without a key, an override without a valid unit) or exceeds the
// request bounds of Options (too many descriptors or entries, a domain, key
// or value too long, a hits_addend too large). Errors that wrap it name the
// offending descriptor and entry by index. The adapters answer it with
// gRPC InvalidArgument and HTTP 400.
var ErrInvalidRequest = errors.New("invalid rate-limit request")

// ErrUntrusted reports a charge marker (ChargeKey) or a refund in a
// Request that is Untrusted: with them a caller could lock a client out
// or erase its counter. Errors that wrap it wrap ErrInvalidRequest too.
var ErrUntrusted = errors.New("a charge marker or a refund from a source that is not trusted (see --trusted-sources)")

// ErrUnavailable reports that the engine could not decide because its store
// could not; it is store.ErrUnavailable, so errors.Is matches either. Check
// itself does not return it, since every failure mode answers; the
// adapters map it, to gRPC Unavailable and HTTP 503, for checkers that do.
var ErrUnavailable = store.ErrUnavailable

// ErrNoRules reports a check made before any rules were loaded: rules over
// xDS that have not come yet. The adapters answer it as unavailable (gRPC
// Unavailable, HTTP 503), so that Envoy gets an error and applies its own
// failure mode (failure_mode_deny), as it does when envoyproxy/ratelimit,
// which opens no port before its first rules, cannot be reached.
var ErrNoRules = errors.New("no rules loaded yet")

// Request is one rate-limit question: a domain and its descriptors.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// Hits is the request-level hits_addend; 0 means 1.
	Hits uint32
	// Untrusted marks a request from a source that may not charge always
	// or refund: a descriptor with a ChargeKey entry or Refund is then
	// refused with ErrUntrusted. The adapters set it from
	// --trusted-sources.
	Untrusted bool
	// Unrecorded marks a question that is not traffic, such as the admin
	// API's check of what remains: the Recorder does not hear it.
	Unrecorded bool
}

// Descriptor is one descriptor of a Request.
type Descriptor struct {
	// Entries are matched against the rules in order. An entry with key
	// ChargeKey is not matched or counted: it charges the descriptor's
	// hits always.
	Entries []descriptor.Entry
	// Hits is the descriptor-level hits_addend. It applies only when
	// HasHits is set, and then wins over Request.Hits; HasHits with Hits 0
	// checks the limit without consuming.
	Hits    uint64
	HasHits bool
	// Refund gives the hits back instead of consuming them
	// (is_negative_hits).
	Refund bool
	// Override is Envoy's per-descriptor limit override, or nil.
	Override *Override
}

// Override is Envoy's per-descriptor limit override. It replaces the limits
// of the matched rule.
type Override struct {
	RequestsPerUnit uint32
	Unit            descriptor.Unit
	// UnitMultiplier stretches the window ("5 per 5 minutes"); 0 means 1.
	UnitMultiplier uint32
}

// Code is the answer for a request or a descriptor. Its values are those of
// Envoy's RateLimitResponse.Code; an answer never holds the zero Code.
type Code uint8

// The codes.
const (
	OK        Code = 1
	OverLimit Code = 2
)

// String returns "OK" or "OVER_LIMIT".
func (c Code) String() string {
	switch c {
	case OK:
		return "OK"
	case OverLimit:
		return "OVER_LIMIT"
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Status is the answer for one descriptor.
type Status struct {
	Code Code
	// Penalized reports an OverLimit answer from a penalty's cooldown
	// (descriptor.Limit.Penalty): the client kept sending while told to
	// wait, and RetryAfter is the cooldown left.
	Penalized bool
	// Never reports an OverLimit answer that no wait would change: the
	// hit's cost exceeds the limit's whole capacity (Limit still shows
	// it).
	Never bool
	// Limit is the limit reported as Envoy's current_limit: the most
	// restrictive of the matched rule's limits, or the override. It is nil
	// when no counted limit applies, and points into the immutable tree:
	// callers must not modify it.
	Limit *descriptor.Limit
	// Remaining is how many more hits the limit admits now; Unlimited for
	// unlimited and allow-listed descriptors.
	Remaining uint32
	// ResetAfter is Envoy's duration_until_reset.
	ResetAfter time.Duration
	// RetryAfter is how long until the same hit would be admitted; zero
	// unless Code is OverLimit, and zero when Never is set.
	RetryAfter time.Duration
	// Rule is the rule that decided the descriptor: the matched rule whose
	// limits were counted (or, the store failing, answered by its failure
	// mode), or the unlimited, allow-list or deny-list rule that answered
	// without counting. It is nil when no rule decided: the descriptor
	// matched no rule or one without limits, an Envoy override decided it,
	// or every limit of its rule was replaced. It points into the immutable
	// tree: callers must not modify it.
	Rule *descriptor.Rule
}

// Header is one response header.
type Header struct {
	Key, Value string
}

// Response is the answer to a Request.
type Response struct {
	// Code is OverLimit when any descriptor not in quota mode is over its
	// limit, or when the request has quota-mode descriptors and all of them
	// are over; otherwise OK.
	Code Code
	// Statuses has one status per request descriptor, in request order.
	Statuses []Status
	// Headers go on the downstream response, on OK and on the 429 alike.
	Headers []Header
	// Body is the JSON body of a 429; nil unless Code is OverLimit.
	Body []byte
}
