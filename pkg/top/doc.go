// Package top answers "who is being limited, and by which rule": for
// every rule identity — domain, rule path and limit name, the labels of
// the tollgate_decisions metric — the busiest descriptor values by
// requests (decisions, weighted by hits) and by rejections, over the
// last minute, five minutes and hour, in memory that does not grow with
// the number of distinct values.
//
// # Summaries
//
// Each rule identity keeps two summaries per interval, one of requests
// and one of rejections, each of K counters (Options.Capacity, the
// --top-capacity flag). The interval being recorded is a Space-Saving
// summary: a value not counted takes the place of the smallest counter
// and inherits its count as its error. Finished intervals are kept in
// Misra-Gries form (a counter per value and one delta per summary) and
// merged: ten-second slots into minutes, minutes into five-minute
// blocks; a window is the merge of the live slot and the finished
// intervals it spans (see ring). Merging adds counters and deltas and
// then prunes back to K counters with Misra-Gries' decrement, which
// keeps
//
//	Σ counters + K·delta ≤ N
//
// where N is the total of the stream the summary covers. Hence, for
// every window, and for any merge of windows or of instances:
//
//   - every reported count is an upper bound, and overstates the true
//     count by at most its error, which is at most N/K, N being the
//     rule identity's total in the window (of requests, or of
//     rejections), over every instance merged;
//   - every value whose true count exceeds N/K is in the answer's
//     summary, with its exact identity: a flood of distinct values
//     cannot push a heavy hitter out, only raise N and so the error;
//   - memory is at most 2·K entries per interval kept, whatever the
//     number of distinct values: 2·K counters live and at most 25 other
//     intervals per rule identity, each value's key copied once, when
//     it takes a counter, and shared by every summary that holds it.
//
// Errors add up when summaries merge: the merge of instances' summaries
// overstates by at most the sum of their errors, which is still at most
// N/K with N the fleet's total. Each entry of an answer carries its own
// error, often far below the bound (zero for a value counted from the
// start of every interval it appears in).
//
// What it does not guarantee: the order of values whose counts differ by
// less than their errors; counts of values below N/K, which may be
// missing or overstated; exact window edges (a window covers at least
// its length, and at most one step of its intervals more: 10 s for the
// minute, one minute for five minutes, five minutes for the hour; rates
// divide by the span actually covered, and at least 10 s, so that a
// young instance reports no burst over its first milliseconds); decisions
// after an identity was idle for over an hour and forgotten are counted
// afresh.
//
// # Identities and values
//
// A value is a descriptor's entries, encoded with the length of every
// key and value (unambiguous whatever they hold). The engine asks a
// Recorder for one Rule per identity and rule set (Recorder.Rule) and
// calls Rule.Observe for every decided descriptor: an update is a hash,
// a probe of a small table and a few heap moves under the identity's
// mutex, and copies nothing unless the value takes a counter.
//
// # Fleet
//
// A Snapshot is one instance's summaries per identity and window.
// With the Redis store every instance publishes its own (package
// top/redis), and with Options.Peers, Top and Rules merge them with
// this instance's: Answer.Instances says how many were merged.
package top
