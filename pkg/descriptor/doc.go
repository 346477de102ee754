// Package descriptor loads tollgate's rate-limit configuration and matches
// request descriptors against it.
//
// # Format
//
// The YAML format of envoyproxy/ratelimit is read unchanged: one domain per
// file, a list of descriptors with key, optional value and nested
// descriptors, and on each descriptor rate_limit (unit, requests_per_unit,
// unlimited, name, replaces), shadow_mode, quota_mode, detailed_metric,
// value_to_metric, share_threshold and metadata. Units are second, minute,
// hour, day, week, month (30 days) and year (365 days), in any case.
//
// tollgate adds, all optional:
//
//   - inside rate_limit: algorithm (token_bucket, fixed_window,
//     sliding_window_counter, sliding_window_log), burst (token_bucket only),
//     unit_multiplier (a window of several units, such as 5 minutes),
//     charge (admitted: a rejected hit takes nothing; always: the cost is
//     added whatever the answer, as usage reported after a response must
//     be) and precision (strict: every hit is decided at the shared
//     counter; cached: most hits are decided from a lease reserved from
//     it, see pkg/store/cached);
//   - on a descriptor: rate_limits, a list of rate_limit objects that must
//     all pass; action (allow: admit without counting; deny: always
//     OVER_LIMIT); failure_mode (open, closed or local); values_file, a
//     file of values in place of value (see Values files);
//   - on the domain: defaults (algorithm, failure_mode, burst, charge,
//     precision) and shard_by, the entry key whose value forms the Redis
//     hash tag.
//
// A limit's algorithm is its own, else the domain's defaults, else
// Options.DefaultAlgorithm, else token_bucket. A rule's failure mode is its
// own, else the domain's defaults, else Options.DefaultFailureMode (open
// when unset), and a limit's charge likewise falls back to
// Options.DefaultCharge (admitted when unset). A default burst applies to
// token-bucket limits that set none. A limit's precision is its own, else
// the domain's defaults, else Options.DefaultPrecision (strict when
// unset); a default precision applies only to limits that can be leased,
// so a sliding_window_log limit stays strict, and naming precision cached
// on a sliding_window_log limit is an error: it is never leased, since its
// exactness is the reason to choose it. The tree dump names a limit's
// charge only when it is always and its precision only when it is cached.
//
// Decoding is strict. An unknown or duplicate field, a bad value or a
// contradictory rule is an *Error naming the file, the line and the
// descriptor path, and one bad file fails the whole load.
//
// # Matching
//
// Match walks the request's entries level by level, starting at the
// domain's top-level descriptors. At each level, among the descriptors
// whose key equals the entry's key, it takes:
//
//  1. the descriptor whose value equals the entry's value;
//  2. else the first descriptor, in configuration order, whose wildcard
//     value matches: "*" stands for any run of characters, including
//     none, anywhere in the value ("sk_*", "*.internal", "v*-beta");
//  3. else the descriptor with no value (the key's default).
//
// The next entry is matched among the children of the descriptor just
// taken; a choice is never revisited. The rule is the rule of the
// descriptor taken for the last entry. If an entry matches nothing, or the
// request has more entries than the tree is deep, or the last descriptor
// has no rate_limit, rate_limits or action, there is no rule: a parent's
// rule never applies to a longer or shorter descriptor. Keys and values
// are compared as separate strings, so key "a_b" with value "c" and key
// "a" with value "b_c" are different descriptors.
//
// For example, with
//
//	descriptors:
//	  - key: api_key
//	    value: sk_test_*          # (1)
//	    rate_limit: {unit: minute, requests_per_unit: 10}
//	  - key: api_key
//	    value: sk_*               # (2)
//	    action: allow
//	  - key: api_key
//	    value: sk_test_vip        # (3)
//	    rate_limit: {unit: minute, requests_per_unit: 1000}
//	  - key: api_key              # (4)
//	    rate_limit: {unit: minute, requests_per_unit: 100}
//	    descriptors:
//	      - key: endpoint
//	        value: /search        # (5)
//	        rate_limit: {unit: minute, requests_per_unit: 30}
//
// the descriptors resolve as follows:
//
//	[api_key=sk_test_vip]                   (3): exact beats every wildcard
//	[api_key=sk_test_1]                     (1): the first matching wildcard
//	[api_key=sk_live_1]                     (2): allowed, not counted
//	[api_key=k1]                            (4): the key's default
//	[api_key=k1, endpoint=/search]          (5)
//	[api_key=k1, endpoint=/users]           none: no fallback to (4)
//	[api_key=sk_test_1, endpoint=/search]   none: (1) has no children, and
//	                                        matching does not go back to (4)
//
// With share_threshold: true on a wildcard descriptor, every value that
// matches the pattern counts in one shared counter: Rule.Shared holds the
// pattern at that level, and the limiter counts the pattern instead of the
// request's value.
//
// Match does not allocate. Explain gives the same answer step by step.
//
// # Values files
//
// A descriptor may take its values from a file instead of value:
// values_file names a file of the configuration directory, relative to
// it ("lists/revoked-keys.txt"; not outside it, not hidden, not *.yaml or
// *.yml). The file holds one exact value or "*" pattern per line; spaces
// around a value are trimmed, and blank lines and lines starting with "#"
// are skipped ("#" after a value is an error rather than part of it). The
// descriptor stands for one descriptor per value, all with its action or
// limits and its nested descriptors: its exact values join the exact
// values of its key at its level, and its patterns join the wildcards at
// its place among them, in line order. So with
//
//	descriptors:
//	  - key: api_key
//	    value: sk_test_1            # (1)
//	    action: allow
//	  - key: api_key
//	    values_file: revoked.txt    # (2) holds sk_live_9 and sk_test_*
//	    action: deny
//	  - key: api_key
//	    value: sk_*                 # (3)
//	    rate_limit: {unit: second, requests_per_unit: 5}
//
// [api_key=sk_test_1] resolves to (1), exact before any pattern;
// [api_key=sk_live_9] and [api_key=sk_test_2] to (2); [api_key=sk_x] to
// (3). Every value is counted on its own, as for an exact descriptor, and
// the rule's Path names the file ("api_key in revoked.txt"), so metrics
// stay bounded however long the list.
//
// Exact values are looked up in one hash map, so their number does not
// change the cost of a request; patterns are tried in turn and count
// against Options.MaxPatterns. A value listed twice, in one file or in
// the file and a sibling descriptor, is an error naming the values file
// and its line. Tree.ValuesFiles names the files read, for a watcher; the
// dump shows each file's counts and a digest of its values, so editing a
// values file changes the tree's hash. Rules that do not come from a
// directory, such as those delivered over xDS, set
// Options.RefuseValuesFiles.
//
// # Loading
//
// Load reads every *.yaml and *.yml file under a directory, recursively, in
// sorted order, skipping names that start with "." (so a Kubernetes
// ConfigMap mount is read once, through its top-level symlinks). A Tree is
// immutable; a reload builds a new one and swaps it in.
package descriptor
