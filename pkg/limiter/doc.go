// Package limiter is tollgate's engine. It resolves each descriptor of a
// request to a rule of the current descriptor tree, applies policy, sends
// every hit of the request to the store in one batch, and builds the
// answer: an overall code, one status per descriptor in request order,
// response headers and, when over the limit, a JSON body. It knows nothing
// of Envoy's protos; package rls adapts it to gRPC and package httpapi to
// HTTP.
//
// # Requests
//
// Check rejects a malformed request with an error wrapping
// ErrInvalidRequest that names the descriptor and entry by index, before
// anything is counted: no domain, no descriptors, a descriptor without
// entries, an entry without a key, an override without a valid unit. It
// rejects a request beyond the bounds of Options the same way: more than
// MaxDescriptors descriptors or MaxEntries entries in one, a domain or key
// longer than MaxKeyLen bytes, a value longer than MaxValueLen, a
// hits_addend (of the request or of a descriptor) above MaxHits. Zero
// bounds are the defaults (DefaultMaxDescriptors and so on; DefaultMaxHits
// is Envoy's own cap, 10^9). A ChargeKey entry whose value is not
// "always", or a descriptor with nothing but ChargeKey entries, is
// malformed too. The engine owns these checks so that every adapter
// applies the same ones; the adapters only map the error, to gRPC
// InvalidArgument and HTTP 400.
//
// # Policy
//
// A descriptor is answered by the first that applies of:
//
//   - unknown domain: OK, no current limit (an Envoy override is ignored,
//     as envoyproxy/ratelimit ignores it);
//   - action: deny: OVER_LIMIT, not counted, marker "X-RateLimit-Policy:
//     denylist". The other descriptors of the request are only checked
//     (their positive costs become 0), since the request is rejected;
//   - action: allow: OK with Remaining Unlimited, not counted, marker
//     "X-RateLimit-Policy: allowlist";
//   - an Envoy limit override: counted against one limit {requests_per_unit,
//     unit, unit_multiplier} with the request's own entries, whether or not
//     a rule matched and even if the rule is unlimited. It keeps the
//     algorithm, charge and precision of the rule's first limit, else
//     Options.DefaultAlgorithm and Options.DefaultCharge. As in
//     envoyproxy/ratelimit it has no name, ignores the rule's shadow_mode,
//     quota_mode and share_threshold, and neither replaces nor is replaced.
//     One that gives a limit the algorithms cannot take (a sliding-window
//     log past MaxLogRequests) is ignored: the rule decides as if it were
//     absent, and tollgate_envoy_limits_ignored counts it. The allow and
//     deny lists above still win over it;
//   - no rule, or a rule without limits: OK, no current limit;
//   - unlimited: OK with Remaining Unlimited, not counted;
//   - otherwise one store hit per limit of the rule.
//
// All hits of a request go to the store in one Apply call, so a request is
// all or nothing: when one hit that is not soft is rejected, nothing is
// charged, except the always-charged hits (see Charge). A descriptor with
// several limits reports the most restrictive: a rejected one (the longest
// wait first), else the one with the least remaining.
//
// # Operators' overrides
//
// Options.Overrides gives the live overrides an operator set through the
// admin API (package override). For a counted descriptor, the override
// of its domain whose entries are the longest prefix of the descriptor's
// (exact keys and values; of equally long ones the newest) replaces the
// limits the descriptor would be counted against, until its ExpiresAt on
// the Options.Now clock:
//
//   - an absolute override counts one limit, its requests_per_unit per
//     unit, with the algorithm, burst, charge and precision of the first
//     limit it replaces;
//   - a multiplier multiplies the requests_per_unit and burst of every
//     limit, rounded down, requests_per_unit at least 1.
//
// Each limit it sets is named "override:<id>", so Envoy's
// current_limit.name says an override decided; Status.Rule stays the rule.
// It changes limits, not counters: a counter is named by its domain,
// entries, algorithm and period, so raising a limit mid-window admits the
// difference and lowering it rejects at once (an absolute limit of
// another unit counts in a counter of its own). It applies on top of an
// Envoy limit override, to the limit Envoy's override set: the operator
// has the last word. It does not apply to descriptors that are not
// counted (no rule, unlimited, allow and deny lists). A multiplied limit
// is replaced by the name of the rule's own limit; an absolute one, like
// an Envoy override, neither replaces nor is replaced. Metrics name an
// overridden descriptor's limit "(override)".
//
// With no overrides the cost is one atomic load per request.
//
// # Reset
//
// Reset resolves a request as Check does and clears, through the store's
// Clear (see package store), the counter of every limit Check would count,
// and under an operator's absolute override the rule's own counters too.
// Options.OnReset then hears of them, for the other instances.
//
// # Hits
//
// A descriptor's own hits_addend (Descriptor.HasHits) wins, and 0 there
// checks the limits without consuming; otherwise the request's hits_addend
// counts, where 0 means 1. Descriptor.Refund gives the hits back.
//
// # Precision
//
// Each hit of a limit whose precision is cached (descriptor.Limit.Precision)
// is marked store.Hit.Cached, so a store that leases budgets
// (pkg/store/cached) may decide it from a lease; an override takes the
// precision of the rule's first limit. A sliding_window_log limit is never
// marked. Other stores ignore the mark.
//
// # Charge
//
// Each hit carries its limit's charge (descriptor.Limit.Charge). A
// descriptor with an entry ChargeKey=always, at any position, has every
// hit charged always, whatever its limits say: the entry is removed before
// matching and before the counter is named, so the descriptor names the
// rule and the counter it names without it. This is how a raw Envoy
// configuration charges a report sent after the response (a generic_key
// action with descriptor_key tollgate.charge on the stream-done rule only)
// on the counter its request-time check admits against.
//
// An always-charged hit's cost is added whatever the verdict (see
// store.Store for how a batch applies it): a deny list does not turn it
// into a check, a failing-closed descriptor does not turn its local hit
// into one, and the quota-mode refund does not give it back. Its
// descriptor's status is OVER_LIMIT when its counter ends past the limit,
// and the overall code follows the statuses as always.
//
// # Penalties
//
// Each hit carries its limit's penalty (descriptor.Limit.Penalty; see
// algorithm.ApplyPenalty for the rules), and the store keeps its state
// beside the counter. A descriptor rejected by a penalty's cooldown gets a
// status with Penalized set and RetryAfter the cooldown left, and the
// answer carries "X-RateLimit-Policy: penalty" unless the rule is in
// shadow mode. An always-charged hit (by its limit or by the ChargeKey
// entry) is neither blocked nor counted.
//
// A rejected hit whose cost exceeds its limit's capacity can never pass:
// its status has Never set and no RetryAfter, and the answer carries no
// Retry-After and a body that says so.
//
// # Replaces
//
// As in envoyproxy/ratelimit, a named limit is not applied when its name is
// in the replaces list of another rule matched by a descriptor of the same
// request, whether that rule is counted, unlimited or itself replaced. A
// descriptor whose limits are all replaced answers OK with no current
// limit.
//
// # Shadow and quota mode
//
// The hits of a rule in shadow mode (its own shadow_mode or
// Options.ShadowMode) and in quota mode are soft: they never block the rest
// of the batch. A shadow descriptor over its limit answers OK and is
// counted in metrics as shadow_over_limit; a deny rule in shadow mode
// answers OK and is counted as shadow_denylist. A quota-mode descriptor
// over its limit keeps its OVER_LIMIT status, as in envoyproxy/ratelimit,
// but the overall code is OVER_LIMIT only if a descriptor not in quota mode
// is over, or if the request has quota-mode descriptors and all of them are
// over. Because quota hits are soft they cannot stop the batch, so when all
// of them are over, the admitted hits of the request are refunded in a
// second batch.
//
// # Store failures
//
// With Options.StoreTimeout set, every store call ends at the earlier of
// that timeout and the caller's deadline less Options.DeadlineMargin, and a
// caller that leaves the store less than a millisecond is answered as if
// the store had failed, without asking it. When the store fails, the
// request is answered, not failed: each counted descriptor by its rule's
// failure mode (Rule.FailureMode; an Envoy override on a descriptor without
// a rule by Options.DefaultFailureMode):
//
//   - open (the default): OK with no current limit and no invented
//     remaining;
//   - closed: OVER_LIMIT, reporting the descriptor's first limit, with
//     Retry-After the wait the store's error names when it is a
//     store.RetryAfterError (as an open circuit breaker's refusal is),
//     else one second;
//   - local: decided by Options.Fallback, an in-process store, with every
//     limit divided by Options.FallbackShare (at least 1 unless it is 0),
//     and reported with that share as its current limit. The local hits of
//     a request that a closed descriptor rejects only check. Without a
//     fallback, or when it fails too, local answers as open.
//
// Shadow mode still wins (a closed rule in shadow mode answers OK), and
// deny and allow lists, which the store never decides, answer as always.
// Every answer decided without the store carries "X-RateLimit-Policy:
// degraded"; the descriptors not decided locally are counted in metrics as
// degraded, and the failure is counted and logged at most once per 10
// seconds. When the request's context has ended, Check returns the
// context's error instead of an answer.
//
// # Headers
//
// Options.HeaderStyle chooses the rate-limit headers, computed from the
// most restrictive status that has a limit; see HeaderStyle. Whatever the
// style, an OVER_LIMIT answer carries Retry-After (whole seconds, rounded
// up, at least 1, the longest wait among the over-limit statuses), a body
// such as
//
//	{"code":429,"message":"rate limit exceeded","limit":10,"window":60,"retry_after_seconds":7,"reset_at":"2026-01-01T00:01:00Z"}
//
// and "content-type: application/json". A request blocked only by a deny
// list gets {"code":429,"message":"request denied by policy",
// "retry_after_seconds":1}. A request blocked by a penalty gets the body
// of the penalized status, its message saying so and "penalty":true; one
// with a cost above a limit's capacity gets no Retry-After and
// {"code":429,"message":"request cost exceeds the limit's capacity: it can
// never be admitted","limit":15,"window":1}. Limits in headers and bodies
// are capacities: requests per unit plus burst.
//
// # Metrics
//
// tollgate_decisions counts descriptors by domain, rule path, limit name
// and result (ok, over_limit, shadow_over_limit, allowlist, denylist,
// shadow_denylist, unmatched, unlimited, replaced, degraded, penalized:
// over the limit by a penalty's cooldown);
// tollgate_charged_past_limit_hits adds the costs of always-charged hits
// that the store rejected, and so charged past their limits, by domain,
// rule path and limit name; tollgate_store_errors counts failed batches;
// tollgate_check_duration records the time of each Check in seconds.
// Attributes never carry descriptor values: unknown domains are recorded as
// "(unknown)" and overrides as limit "(override)", so cardinality is
// bounded by the configuration. detailed_metric and value_to_metric are
// therefore ignored.
//
// # Traces
//
// With Options.TracerProvider, each Check is a span named limiter.Check,
// and each store call within it a child span named store.Apply, whose
// tollgate.store attribute says primary or fallback. The decision span
// carries the domain, the number of descriptors, the overall code and, per
// descriptor in request order, the rule path, the limit name and the
// metrics result, with whether the answer is degraded and which failure
// modes answered. Like the metrics' attributes they never carry a
// descriptor value, and errors are recorded by class (store_unavailable,
// deadline_exceeded and so on), not by their text. Without a provider,
// Check starts no span and allocates nothing for tracing.
package limiter
