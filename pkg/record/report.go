package record

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// What a Report's before is.
const (
	BaselineRecorded = "recorded"
	BaselineReplayed = "replayed"
)

// Why a replayed verdict differs from the recorded one of the same
// rules (Reproduction.Reasons).
const (
	// ReasonBefore: the hit fell within the limit's first window (or
	// refill period) of the recording, so the hits its counter held when
	// the recording began, which it does not hold, could decide it.
	ReasonBefore = "counter state before the recording began"
	// ReasonMissing: recorded over the limit, replayed under it. The
	// counter had hits that the recording lacks: those of other instances
	// sharing it in Redis, of clients not sampled, of lines dropped, or a
	// counter reset through the admin API.
	ReasonMissing = "hits the recording lacks (other instances, clients not sampled, dropped lines)"
	// ReasonUncounted: recorded under the limit, replayed over it. The
	// store did not count as the memory store does: a failure mode
	// answered while it failed, or cached precision's local budgets.
	ReasonUncounted = "hits the store did not count (failure mode, cached precision)"
	// ReasonRule: another rule decided, as after a reload that the
	// recording does not hold.
	ReasonRule = "another rule decided (rules reloaded while recording)"
)

// Report is what a Replay found.
type Report struct {
	// Baseline is BaselineRecorded or BaselineReplayed: what before is.
	Baseline string `json:"baseline"`
	// RulesHash is the replayed rules' hash, BaselineHash the baseline's
	// when replayed, and RecordedHash that of the rules the recording
	// was made under. RulesChanged reports files of the recording made
	// under different rules.
	RulesHash    string  `json:"rules_hash"`
	BaselineHash string  `json:"baseline_hash,omitempty"`
	RecordedHash string  `json:"recorded_hash"`
	RulesChanged bool    `json:"rules_changed,omitempty"`
	Scale        float64 `json:"scale"`
	// Sample is the smallest share of clients the recording sampled.
	Sample float64 `json:"sample"`
	// From and To are the recorded times of the first and last call.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`

	// Calls counts the calls replayed, and of them those answered
	// OVER_LIMIT before and after, and those whose answer changed.
	Calls          int64 `json:"calls"`
	RejectedBefore int64 `json:"rejected_before"`
	RejectedAfter  int64 `json:"rejected_after"`
	NewlyRejected  int64 `json:"newly_rejected"`
	NewlyAdmitted  int64 `json:"newly_admitted"`
	// Refused counts the calls the engine refused as invalid under the
	// replay's request bounds, not replayed; RefusedReason is the first
	// one's error.
	Refused       int64  `json:"refused,omitempty"`
	RefusedReason string `json:"refused_reason,omitempty"`

	// Rules has a row per rule that decided a descriptor before or
	// after, by domain and path; the rule "" stands for descriptors no
	// rule decided (no match, or Envoy's limit override), listed when
	// some were rejected.
	Rules []RuleReport `json:"rules"`

	// Reproduction compares the recorded verdicts with those replayed
	// through the rule set the recording was made under, when one of
	// them is and the scale is 1.
	Reproduction Reproduction `json:"reproduction"`

	// Decisions counts the engine's decisions (a call through each rule
	// set), made in Elapsed.
	Decisions int64         `json:"decisions"`
	Elapsed   time.Duration `json:"elapsed_ns"`
}

// RuleReport is one rule's row of a Report. Before counts the
// descriptors the rule decided before, after those it decides after.
type RuleReport struct {
	Domain         string `json:"domain"`
	Rule           string `json:"rule"`
	RequestsBefore int64  `json:"requests_before"`
	Requests       int64  `json:"requests"`
	RejectedBefore int64  `json:"rejected_before"`
	RejectedAfter  int64  `json:"rejected_after"`
	// NewlyRejected are the descriptors the rule rejects that were
	// admitted before, by client; NewlyAdmitted those it rejected before
	// that are admitted after.
	NewlyRejected Clients `json:"newly_rejected"`
	NewlyAdmitted Clients `json:"newly_admitted"`
}

// Row returns the row of the rule at path in domain; an empty one when
// the rule decided nothing.
func (r *Report) Row(domain, rule string) RuleReport {
	for _, row := range r.Rules {
		if row.Domain == domain && row.Rule == rule {
			return row
		}
	}
	return RuleReport{Domain: domain, Rule: rule}
}

// Unmatched reports a rule that decided descriptors before and decides
// none after.
func (r *RuleReport) Unmatched() bool { return r.Rule != "" && r.RequestsBefore > 0 && r.Requests == 0 }

// Clients counts descriptors and their clients, and lists the clients
// of the most.
type Clients struct {
	Total   int64         `json:"total"`
	Clients int           `json:"clients"`
	Top     []ClientCount `json:"top"`
}

// ClientCount is a client and its count.
type ClientCount struct {
	Client string `json:"client"`
	Count  int64  `json:"count"`
}

// Reproduction is how many replayed verdicts of the rules the recording
// was made under equal the recorded ones.
type Reproduction struct {
	// Set is "rules" or "baseline", the replayed set with the recording's
	// rules hash; "" when neither has it, or the scale is not 1, and
	// nothing was compared.
	Set string `json:"set,omitempty"`
	// Compared counts the descriptors compared, and Differ those whose
	// verdict or rule differs, by reason (the Reason constants).
	Compared int64            `json:"compared"`
	Differ   int64            `json:"differ"`
	Reasons  map[string]int64 `json:"reasons,omitempty"`
}

// NewRejectionShare returns the share of the calls newly rejected, in
// percent.
func (r *Report) NewRejectionShare() float64 {
	if r.Calls == 0 {
		return 0
	}
	return 100 * float64(r.NewlyRejected) / float64(r.Calls)
}

// DecisionsPerSecond returns the replay's speed.
func (r *Report) DecisionsPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Decisions) / r.Elapsed.Seconds()
}

// WriteText writes r for a reader: the totals, a table of the rules, the
// clients newly rejected and admitted, the rules that match nothing any
// more, and how exactly the recording was reproduced.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	before := "the recorded answers"
	if r.Baseline == BaselineReplayed {
		before = "the baseline rules (" + short(r.BaselineHash) + ")"
	}
	if r.Calls == 0 {
		b.WriteString("Replayed no calls")
	} else {
		fmt.Fprintf(&b, "Replayed %d calls recorded %s – %s", r.Calls, r.From.UTC().Format(time.RFC3339), r.To.UTC().Format(time.RFC3339))
	}
	if r.Scale != 1 {
		fmt.Fprintf(&b, ", %g times as dense", r.Scale)
	}
	fmt.Fprintf(&b, ", through rules %s; before is %s.\n", short(r.RulesHash), before)
	fmt.Fprintf(&b, "Calls rejected: %d before, %d after; newly rejected %d (%.2f%%), newly admitted %d.\n",
		r.RejectedBefore, r.RejectedAfter, r.NewlyRejected, r.NewRejectionShare(), r.NewlyAdmitted)
	if r.Refused > 0 {
		fmt.Fprintf(&b, "Not replayed: %d calls these settings refuse, such as: %s\n", r.Refused, r.RefusedReason)
	}
	if r.Sample < 1 {
		fmt.Fprintf(&b, "The recording holds %g of the clients: a counter that other clients share saw fewer hits than it did live.\n", r.Sample)
	}
	if r.RulesChanged {
		b.WriteString("The recording's files were made under different rules.\n")
	}

	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tRULE\tREQUESTS\tREJECTED\tNEWLY REJECTED\tNEWLY ADMITTED")
	for _, row := range r.Rules {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", row.Domain, ruleName(row.Rule), change(row.RequestsBefore, row.Requests),
			change(row.RejectedBefore, row.RejectedAfter), row.NewlyRejected.Total, row.NewlyAdmitted.Total)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	sep := "\n"
	for _, row := range r.Rules {
		for _, list := range []struct {
			what string
			c    Clients
		}{{"newly rejected", row.NewlyRejected}, {"newly admitted", row.NewlyAdmitted}} {
			if list.c.Total == 0 {
				continue
			}
			fmt.Fprintf(&b, "%s%s %s, clients %s:", sep, row.Domain, ruleName(row.Rule), list.what)
			for _, c := range list.c.Top {
				fmt.Fprintf(&b, " %s (%d)", c.Client, c.Count)
			}
			if more := list.c.Clients - len(list.c.Top); more > 0 {
				fmt.Fprintf(&b, " and %d more", more)
			}
			b.WriteString("\n")
			sep = ""
		}
	}
	var gone []string
	for _, row := range r.Rules {
		if row.Unmatched() {
			gone = append(gone, row.Domain+" "+row.Rule)
		}
	}
	if len(gone) > 0 {
		fmt.Fprintf(&b, "\nRules that match nothing any more: %s\n", strings.Join(gone, ", "))
	}

	rp := r.Reproduction
	switch {
	case rp.Set == "":
		fmt.Fprintf(&b, "\nNeither rule set is the one recorded under (%s), so the recorded answers were not reproduced.\n", short(r.RecordedHash))
	case rp.Differ == 0:
		fmt.Fprintf(&b, "\nThe %s are those recorded under: all %d recorded answers reproduced.\n", setName(rp.Set), rp.Compared)
	default:
		fmt.Fprintf(&b, "\nThe %s are those recorded under: %d of %d recorded answers reproduced; %d differ:\n",
			setName(rp.Set), rp.Compared-rp.Differ, rp.Compared, rp.Differ)
		reasons := make([]string, 0, len(rp.Reasons))
		for why := range rp.Reasons {
			reasons = append(reasons, why)
		}
		slices.Sort(reasons)
		for _, why := range reasons {
			fmt.Fprintf(&b, "  %d: %s\n", rp.Reasons[why], why)
		}
	}
	fmt.Fprintf(&b, "%d decisions in %v (%.0f a second).\n", r.Decisions, r.Elapsed.Round(time.Microsecond), r.DecisionsPerSecond())
	_, err := io.WriteString(w, b.String())
	return err
}

// change returns "n" when before and after are equal, else "before →
// after".
func change(before, after int64) string {
	if before == after {
		return fmt.Sprint(after)
	}
	return fmt.Sprintf("%d → %d", before, after)
}

func setName(set string) string {
	if set == "baseline" {
		return "baseline rules"
	}
	return "rules"
}

func ruleName(rule string) string {
	if rule == "" {
		return "(no rule)"
	}
	return rule
}

// short returns the first 12 digits of a hash.
func short(hash string) string {
	if hash == "" {
		return "(none)"
	}
	return hash[:min(12, len(hash))]
}
