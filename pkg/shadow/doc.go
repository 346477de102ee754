// Package shadow runs a second rule set beside the live one, without
// enforcing it: every call the engine decides is decided again under the
// shadow rules, and what they would have answered is counted, never
// answered.
//
// # Guarantees
//
//   - The live answer is neither changed nor delayed. The engine hands each
//     decided call to Set.Record after its answer is complete; Record
//     copies the call into a recycled buffer and offers it to a bounded
//     queue. A call that does not fit is dropped and counted in
//     tollgate_shadow_dropped_total and in Status, never waited for.
//   - One goroutine, Set.Run, decides the queued calls in turn on an
//     engine of the shadow set's own: the live engine's policy (global
//     shadow mode, the defaults, the request bounds, the operators' live
//     overrides), the shadow rules, and a memory store of its own. Its
//     clock, and its store's, read the instant the live engine decided
//     the call, so the shadow rules judge every call at the time the live
//     ones did, however long it waited in the queue. Calls decided
//     concurrently may reach the queue slightly out of order, as they
//     reach a shared store.
//   - Per descriptor, tollgate_shadow_decisions_total{domain,rule,limit,result}
//     counts what the shadow rules answered, labelled as
//     tollgate_decisions_total is: the rule's path and the limit's name
//     from the configuration, "(override)" for an override's limit,
//     "(unknown)" for a domain that neither rule set knows, and never a
//     descriptor value. result is over_limit (the descriptor would have
//     been answered OVER_LIMIT), ok, or unmatched (no rule decided it).
//     A rule in shadow_mode answers OK under the shadow rules as it would
//     live.
//   - Per call, tollgate_shadow_differences_total{domain,change} counts
//     the calls whose overall code the shadow rules would change:
//     newly_rejected (answered OK, OVER_LIMIT under the shadow rules) and
//     newly_admitted (the other way round).
//   - With Options.Top, the shadow set's top clients are kept in a
//     top.Recorder of its own, as the live ones are.
//
// # What it does not do
//
//   - The shadow counters are this instance's alone. With a fleet sharing
//     Redis, a live limit holds across the fleet while a shadow limit
//     counts only the calls this instance decided: behind a balancer of N
//     instances, compare a shadow limit with the live one divided by N.
//   - The memory store does not fail, so failure modes, leases
//     (precision cached) and the local fallback never apply in the
//     shadow.
//   - A dropped call is not decided: while calls are dropped, the shadow
//     counters see less traffic than the live ones, and admit more.
//   - Calls decided before any shadow rules loaded (a shadow directory
//     broken from the start) are taken from the queue and not counted.
package shadow
