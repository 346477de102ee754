package descriptor

import (
	"fmt"
	"strings"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// Entry is one key/value pair of a request descriptor. Its JSON form,
// {"key": ..., "value": ...}, is the one of the HTTP and admin APIs and of
// stored overrides.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Unit is a rate-limit time unit. Its numeric values are those of Envoy's
// RateLimitResponse.RateLimit.Unit enum, so the rls adapter converts by cast.
type Unit uint8

// The units, numbered as in Envoy's response enum.
const (
	Second Unit = 1
	Minute Unit = 2
	Hour   Unit = 3
	Day    Unit = 4
	Month  Unit = 5
	Year   Unit = 6
	Week   Unit = 7
)

var unitNames = [...]string{Second: "second", Minute: "minute", Hour: "hour", Day: "day", Month: "month", Year: "year", Week: "week"}

// unitSeconds follows envoyproxy/ratelimit: a month is 30 days, a year 365.
var unitSeconds = [...]int64{Second: 1, Minute: 60, Hour: 3600, Day: 86400, Month: 30 * 86400, Year: 365 * 86400, Week: 7 * 86400}

// ParseUnit returns the unit named s, ignoring case.
func ParseUnit(s string) (Unit, error) {
	for u, name := range unitNames {
		if name != "" && strings.EqualFold(s, name) {
			return Unit(u), nil
		}
	}
	return 0, fmt.Errorf("unknown unit %q (want second, minute, hour, day, week, month or year)", s)
}

// String returns the lower-case name of u.
func (u Unit) String() string {
	if u == 0 || int(u) >= len(unitNames) {
		return fmt.Sprintf("unit(%d)", u)
	}
	return unitNames[u]
}

// Duration returns the length of one u.
func (u Unit) Duration() time.Duration {
	if u == 0 || int(u) >= len(unitSeconds) {
		return 0
	}
	return time.Duration(unitSeconds[u]) * time.Second
}

// Action is a rule's policy beyond counting.
type Action uint8

// The actions. ActionLimit counts hits; ActionAllow admits without counting
// (an allow list, like unlimited); ActionDeny always answers OVER_LIMIT.
const (
	ActionLimit Action = iota
	ActionAllow
	ActionDeny
)

var actionNames = [...]string{ActionLimit: "limit", ActionAllow: "allow", ActionDeny: "deny"}

// ParseAction returns the action named s, ignoring case. Configuration
// names only "allow" and "deny"; a rule without an action counts hits.
func ParseAction(s string) (Action, error) {
	switch {
	case strings.EqualFold(s, "allow"):
		return ActionAllow, nil
	case strings.EqualFold(s, "deny"):
		return ActionDeny, nil
	}
	return 0, fmt.Errorf("unknown action %q (want allow or deny)", s)
}

// String returns the lower-case name of a, such as "deny".
func (a Action) String() string {
	if int(a) >= len(actionNames) {
		return fmt.Sprintf("action(%d)", a)
	}
	return actionNames[a]
}

// FailureMode says how a rule is decided when its store cannot answer.
type FailureMode uint8

// The failure modes. FailOpen admits and marks the answer degraded;
// FailClosed rejects; FailLocal decides with an in-process store.
const (
	FailOpen FailureMode = iota
	FailClosed
	FailLocal
)

var failureModeNames = [...]string{FailOpen: "open", FailClosed: "closed", FailLocal: "local"}

// ParseFailureMode returns the failure mode named s, ignoring case.
func ParseFailureMode(s string) (FailureMode, error) {
	for m, name := range failureModeNames {
		if strings.EqualFold(s, name) {
			return FailureMode(m), nil
		}
	}
	return 0, fmt.Errorf("unknown failure mode %q (want open, closed or local)", s)
}

// String returns the lower-case name of m, such as "open".
func (m FailureMode) String() string {
	if int(m) >= len(failureModeNames) {
		return fmt.Sprintf("failure_mode(%d)", m)
	}
	return failureModeNames[m]
}

// Precision says where a limit's hits are decided when its counters are
// shared (the Redis store). It is a configuration choice, not part of the
// algorithm: the counters and their answers are the same, so it lives here
// rather than in pkg/algorithm, and the limiter turns it into
// store.Hit.Cached.
type Precision uint8

// The precisions. PrecisionStrict, the zero Precision, decides every hit
// at the shared counter. PrecisionCached decides most hits from a lease of
// hits reserved from it (pkg/store/cached): never more than the limit,
// at the price of bounded false rejections. A sliding_window_log limit is
// never leased, so it is always strict.
const (
	PrecisionStrict Precision = iota
	PrecisionCached
)

var precisionNames = [...]string{PrecisionStrict: "strict", PrecisionCached: "cached"}

// ParsePrecision returns the precision named s, ignoring case.
func ParsePrecision(s string) (Precision, error) {
	for p, name := range precisionNames {
		if strings.EqualFold(s, name) {
			return Precision(p), nil
		}
	}
	return 0, fmt.Errorf("unknown precision %q (want strict or cached)", s)
}

// String returns the lower-case name of p, such as "cached".
func (p Precision) String() string {
	if int(p) >= len(precisionNames) {
		return fmt.Sprintf("precision(%d)", p)
	}
	return precisionNames[p]
}

// Limit is one counted limit of a rule.
type Limit struct {
	Name            string // rate_limit.name; may be empty
	Unit            Unit
	UnitMultiplier  uint32 // at least 1
	RequestsPerUnit uint32
	Burst           uint32 // token bucket only
	Algorithm       algorithm.Kind
	Charge          algorithm.Charge
	Precision       Precision // PrecisionStrict for sliding_window_log
	// Penalty is the escalating cooldown of clients that ignore
	// Retry-After, nil for none; never set on a limit charged always.
	// Rules share it read-only.
	Penalty *algorithm.Penalty
}

// Period returns the length of one window of l.
func (l Limit) Period() time.Duration {
	return l.Unit.Duration() * time.Duration(max(l.UnitMultiplier, 1))
}

// Algo returns l in the form the algorithms and stores take.
func (l Limit) Algo() algorithm.Limit {
	return algorithm.Limit{
		Kind:     l.Algorithm,
		Requests: int64(l.RequestsPerUnit),
		Burst:    int64(l.Burst),
		Period:   l.Period().Microseconds(),
		Charge:   l.Charge,
	}
}

// Rule is what a descriptor resolves to: the node matched by its last entry.
// Rules are immutable parts of a Tree.
type Rule struct {
	// Path names the rule's node readably, such as
	// "api_key=*/endpoint=/search" ("key" alone for a key-only default).
	Path string
	// Limits are the counted limits; every one must pass. Empty when the
	// rule is Unlimited, or its Action is not ActionLimit, or the node has
	// no rate_limit (only children).
	Limits    []Limit
	Unlimited bool
	Action    Action
	// Shared holds, per descriptor level, the wildcard pattern that replaces
	// the request's value when counting (share_threshold), or "" where the
	// request's own value counts. len(Shared) is the rule's depth.
	Shared         []string
	ShadowMode     bool
	QuotaMode      bool
	DetailedMetric bool
	ValueToMetric  bool
	Replaces       []string // names of limits this rule's limits replace
	FailureMode    FailureMode
	// Metadata is the rule's metadata (see metadata.go): string, float64,
	// bool, nil, []any and map[string]any values, as a protobuf Struct
	// holds them. The Tree shares it: never change it.
	Metadata map[string]any
}
