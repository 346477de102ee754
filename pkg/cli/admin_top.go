package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tollgatehq/tollgate/pkg/admin"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// ruleID is the identity of a rule in the answers of GET /v1/top and
// GET /v1/rules: its domain, its path and the name of its limit.
type ruleID struct {
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	Limit  string `json:"limit"`
}

// String names the rule as the views show it: its path, with the limit's
// name when it has one of its own, and "-" for an override of a
// descriptor that matches no rule.
func (id ruleID) String() string {
	rule := id.Rule
	if rule == "" {
		rule = "-"
	}
	if id.Limit != "" && id.Limit != id.Rule {
		rule += " [" + id.Limit + "]"
	}
	return rule
}

// topAnswer is what the CLI reads of an answer of GET /v1/top.
type topAnswer struct {
	Window    string     `json:"window"`
	By        string     `json:"by"`
	Instances int        `json:"instances"`
	Partial   bool       `json:"partial"`
	Entries   []topEntry `json:"entries"`
}

// topEntry is one client of one rule in a topAnswer.
type topEntry struct {
	ruleID
	Descriptor []descriptor.Entry `json:"descriptor"`
	Requests   uint64             `json:"requests"`
	Rejected   uint64             `json:"rejected"`
	Error      uint64             `json:"error"`
}

// rulesAnswer is what the CLI reads of an answer of GET /v1/rules.
type rulesAnswer struct {
	Instances int         `json:"instances"`
	Partial   bool        `json:"partial"`
	Rules     []ruleRates `json:"rules"`
}

// ruleRates is one rule of a rulesAnswer: its limit, its rates over the
// last minute and its hottest value's share of the limit.
type ruleRates struct {
	ruleID
	RequestsPerUnit uint32  `json:"requests_per_unit"`
	Unit            string  `json:"unit"`
	Decisions1m     float64 `json:"decisions_per_second_1m"`
	Rejected1m      float64 `json:"rejected_per_second_1m"`
	HottestRatio    float64 `json:"hottest_ratio"`
}

// domains returns the domains of the rules, sorted, each once.
func (a *rulesAnswer) domains() []string {
	var out []string
	for _, r := range a.Rules {
		out = append(out, r.Domain)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// topFlags are the flags of the query of GET /v1/top that admin top and
// top share.
type topFlags struct {
	domain, by, window string
}

func (f *topFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.domain, "domain", "", "only this domain (default: every domain with a rule that decided something in the last hour)")
	fs.StringVar(&f.by, "by", "rejected", "rank the clients by rejected or by requests")
	fs.StringVar(&f.window, "window", "5m", "over the last 1m, 5m or 1h")
}

// check returns a usage error for a --by or --window the API does not
// take.
func (f *topFlags) check() error {
	if f.by != "rejected" && f.by != "requests" {
		return usageError("--by: want rejected or requests, got %q", f.by)
	}
	if f.window != "1m" && f.window != "5m" && f.window != "1h" {
		return usageError("--window: want 1m, 5m or 1h, got %q", f.window)
	}
	return nil
}

// topDomains returns the domains to show: the one asked for, or those of
// the rules of set that decided something in the last hour (of rule, if
// given).
func topDomains(ctx context.Context, cl *admin.Client, set, domain, rule string) ([]string, error) {
	if domain != "" {
		return []string{domain}, nil
	}
	raw, err := cl.Rules(ctx, admin.RulesQuery{Set: set, Rule: rule})
	if err != nil {
		return nil, err
	}
	var rules rulesAnswer
	if err := json.Unmarshal(raw, &rules); err != nil {
		return nil, fmt.Errorf("reading the answer of GET /v1/rules: %w", err)
	}
	return rules.domains(), nil
}

func newAdminTopCommand(c cli, f *adminFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "top [--domain D] [--rule R] [--by rejected|requests] [--window 1m|5m|1h] [--limit N] [--shadow] [--json]",
		Short: "Show the top limited clients of each rule, once",
		Long: `Show the busiest descriptor values of each rule, merged over the fleet: by
rejections (the top limited clients) or by requests, over the last minute,
5 minutes or hour. Counts may overstate by at most the ± error shown. Without
--domain every domain whose rules decided something in the last hour is shown.
With --json it prints the answer of GET /v1/top, or without --domain an object
of each domain's answer. With --shadow it shows the clients under the shadow
rules (--shadow-config-dir) of the instance asked. For a live view, see
tollgate top.`,
		Args: noArgs,
	}
	fs := flags(cmd)
	var tf topFlags
	tf.register(fs)
	rule := fs.String("rule", "", "only this rule, by its name or its path as explain prints it")
	limit := fs.Int("limit", 10, fmt.Sprintf("most clients per domain, 1 to %d", admin.MaxTopLimit))
	asJSON := fs.Bool("json", false, "print the API's JSON instead of a table")
	shadow := fs.Bool("shadow", false, "the clients under the shadow rules (--shadow-config-dir) of the instance asked")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := tf.check(); err != nil {
			return err
		}
		if *limit < 1 || *limit > admin.MaxTopLimit {
			return usageError("--limit: want a number from 1 to %d, got %d", admin.MaxTopLimit, *limit)
		}
		cl, err := f.client(c.getenv)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
		defer cancel()
		set := ""
		if *shadow {
			set = "shadow"
		}
		domains, err := topDomains(ctx, cl, set, tf.domain, *rule)
		if err != nil {
			return err
		}
		answers := make(map[string]json.RawMessage, len(domains))
		for _, d := range domains {
			q := admin.TopQuery{Set: set, Domain: d, Rule: *rule, By: tf.by, Window: tf.window, Limit: *limit}
			if answers[d], err = cl.Top(ctx, q); err != nil {
				return err
			}
		}
		if *asJSON {
			return printTopJSON(c.stdout, tf.domain, answers)
		}
		if len(domains) == 0 {
			_, err := fmt.Fprintln(c.stdout, "no rule decided anything in the last hour")
			return err
		}
		return printTopTables(c.stdout, set, domains, answers)
	}
	return cmd
}

// printTopJSON prints the answer of domain indented, or without a domain
// an object of each domain's answer.
func printTopJSON(w io.Writer, domain string, answers map[string]json.RawMessage) error {
	raw := answers[domain]
	if domain == "" {
		var err error
		if raw, err = json.Marshal(answers); err != nil {
			return fmt.Errorf("encoding the answers: %w", err)
		}
	}
	var out bytes.Buffer
	if err := json.Indent(&out, bytes.TrimSpace(raw), "", "  "); err != nil {
		return fmt.Errorf("the answer is not JSON: %w", err)
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

// printTopTables prints each domain's answer as a table under a line that
// says what it ranks, and under which rules when set is not the live one.
func printTopTables(w io.Writer, set string, domains []string, answers map[string]json.RawMessage) error {
	var out bytes.Buffer
	for i, d := range domains {
		var ans topAnswer
		if err := json.Unmarshal(answers[d], &ans); err != nil {
			return fmt.Errorf("reading the answer of GET /v1/top for domain %s: %w", d, err)
		}
		if i > 0 {
			out.WriteByte('\n')
		}
		fmt.Fprintf(&out, "%s: top by %s over %s", showValue(d), ans.By, ans.Window)
		if set != "" {
			fmt.Fprintf(&out, " under the %s rules", set)
		}
		fmt.Fprintf(&out, ", %s", instances(ans.Instances))
		if ans.Partial {
			out.WriteString(" (partial: some instances did not answer)")
		}
		out.WriteByte('\n')
		if len(ans.Entries) == 0 {
			fmt.Fprintf(&out, "no client %s in the last %s\n", map[string]string{"rejected": "rejected", "requests": "decided"}[ans.By], ans.Window)
			continue
		}
		tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "RULE\tDESCRIPTOR\tREQUESTS\tREJECTED\t±ERROR")
		for _, e := range ans.Entries {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t±%d\n", showValue(e.String()), showEntries(e.Descriptor), e.Requests, e.Rejected, e.Error)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := w.Write(out.Bytes())
	return err
}

// instances says how many instances an answer merged.
func instances(n int) string {
	if n == 1 {
		return "1 instance"
	}
	return strconv.Itoa(n) + " instances"
}

// showEntries shows a descriptor as --descriptor takes it, k=v,k2=v2,
// with the values as the server shows them (plain or hashed).
func showEntries(entries []descriptor.Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(showValue(e.Key))
		b.WriteByte('=')
		b.WriteString(showValue(e.Value))
	}
	return b.String()
}

// showValue returns s, or s quoted with Go's escapes when it holds a
// character that is not printable: descriptor values come from clients,
// and must not move the cursor or recolour an operator's terminal.
func showValue(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
