// Package record is the traffic recorder: it writes the calls the engine
// decides, and the override changes made while it records, to a file of
// JSON lines that a replay reads back (Reader) to answer what a rule
// change would have done to that traffic.
//
// # Format
//
// A recording is UTF-8 text, one JSON object per line, each with a
// "type". Version 1 has three types:
//
//	{"type":"header","version":1,"rules_hash":"9f2c…","start":"2026-11-28T17:00:00.123456Z",
//	 "sample":0.1,"key":"","overrides":[{"id":"…","domain":"api","entries":[…],…}]}
//	{"type":"call","t":1795885200123456,"domain":"api","hits":1,"code":"OVER_LIMIT","descriptors":[
//	 {"entries":[{"key":"api_key","value":"k1"},{"key":"tollgate.charge","value":"always"}],
//	  "hits":0,"refund":false,"override":{"requests_per_unit":5,"unit":"minute","unit_multiplier":1},
//	  "code":"OVER_LIMIT","rule":"api_key","limit":"per_minute"}]}
//	{"type":"override","t":1795885260000000,"change":"created","override":{…}}
//
// Every file (the live one and the rotated PATH.1) opens with exactly one
// header: the format version (Version), the hash of the rule set live
// when the file was opened (the hash tollgate_config_info and /v1/rules
// report), the overrides live then (as GET /v1/overrides shows them,
// values unhidden), the start time, and the sampling in force. A header
// anywhere but the first line is an error.
//
// A "call" line is one decided request. t is the instant the decision
// was made, in microseconds since the Unix epoch: the engine's clock,
// read once per request as its decision begins, the now that overrides,
// penalties and reset headers are judged at. The store reads its own
// clock for the counters (the memory store microseconds later, Redis its
// server's TIME), so a replay on a virtual clock that follows t can
// differ from the recorded verdict for a hit that fell that close to a
// window's edge.
// domain and hits are the request's (hits is the request-level
// hits_addend as sent: 0 means 1), and code its answer, the overall code
// Envoy acted on (OK or OVER_LIMIT). Each descriptor carries its entries
// as sent — a charge marker (tollgate.charge=always) stays among them,
// where the engine finds it —, its own hits_addend when it set one
// (absent: none, 0: check only), refund for is_negative_hits, and
// Envoy's limit override when the request carried one; then the verdict:
// code (OK or OVER_LIMIT, the status Envoy was sent), and the rule and
// limit that decided it (the rule's path and the reported limit's name;
// both absent when no rule decided, such as an unmatched descriptor or an
// unknown domain). A call of a domain the rules do not know is recorded
// too, answered OK.
//
// An "override" line is an override created or deleted (expired ones are
// not written: their expires_at says when), with the time this instance
// learned of it.
//
// Readers must refuse versions they do not know; fields are never
// renamed within a version, only added with a new one.
//
// # Guarantees
//
//   - Recording never blocks or fails a decision. The engine hands each
//     decided request to Recorder.Record, which writes the line into a
//     recycled buffer and offers it to a bounded queue; a line that
//     does not fit is dropped and counted in tollgate_record_dropped_total
//     and in the recording's status, never waited for. One goroutine per
//     recording drains the queue into the file.
//   - Sampling is by client, not by call: the client is the value of the
//     entry keyed Options.Key in the request's first descriptor that has
//     one (default: the domain's shard_by key, else the first entry of
//     the first descriptor), and a hash of it decides, the same way for
//     every call of the recording, so a sampled client's calls are all
//     recorded and replay as they happened.
//   - The file holds descriptor values as sent — API keys, user ids — and
//     is created with mode 0600. When a write would take it past
//     MaxBytes it is renamed to PATH.1 (replacing the previous one) and a
//     new file with a new header begins: at most two files, each at most
//     MaxBytes plus one line.
//   - Lines are written whole, in the order the queue received them;
//     with several decisions at once, lines may be out of time order by
//     the time a decision takes.
//
// # Replay
//
// Replay decides the calls of a recording again, through one rule set or
// two (a change and its baseline), each on a memory store of its own, on
// a virtual clock: the engine and the store both read the call's t, so a
// recording made on the memory store, replayed through the rules it was
// made under, gives back every recorded answer. The overrides of each
// file's header, and those created and deleted while recording, apply
// from the instant they were recorded. What a replay cannot know it
// reports, with the number of answers it concerns (Reproduction): the
// counters' hits from before the recording began; hits the recording
// lacks (other instances sharing a Redis counter, clients not sampled,
// dropped lines, counters reset through the admin API); answers the store
// gave without counting as the memory store does (failure modes, cached
// precision); rules reloaded while recording. The lines are decoded in a
// goroutine of their own and handed over in batches.
//
// What the recorder does not guarantee: a line queued in the instant a recording
// stops may be lost without being counted, and a process killed without
// a shutdown loses what was queued but not written. A file that takes no
// writes (a hung disk, a pipe nobody reads) stalls only the recording:
// Stop and Close give up waiting for it after Options.StopWait, with
// ErrStuck, and its writer finishes when the file takes the writes.
// Opening a named pipe that no one reads blocks Start.
package record
