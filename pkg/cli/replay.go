package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/record"
)

// replayFlags are the flags of replay beside serve's settings.
type replayFlags struct {
	traffic       []string
	baseline      string
	json          bool
	maxNew        float64
	scale         float64
	top           int
	sweepDomain   string
	sweepRule     string
	sweepLimit    string
	sweepField    string
	sweepValues   string
	settings      *pflag.FlagSet
	maxNewChanged func() bool
}

func newReplayCommand(c cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replay --traffic FILE... [--config-dir NEW] [--baseline-dir OLD] [flags]",
		Short: "Replay recorded traffic through a rule set and report what would change",
		Long: `Replay the calls of a recording (--record-file, or POST /v1/record) through
the rules in --config-dir, each on a memory store of its own and on a virtual
clock that follows the recorded times, and report per rule: the requests, the
rejections before and after, the clients newly rejected and newly admitted,
and the rules that match nothing any more. Before is the rules in
--baseline-dir replayed the same way, or else the answers recorded.

The rules load as serve would load them, with the same flags, TOLLGATE_*
environment and settings file. Give the recording's files in any order (a
recording and its rotated FILE.1 replay as one). --max-new-rejections P
exits 1 when more than P percent of the recorded calls would newly be
rejected, to gate a rule change in a pipeline. --sweep-* replays once per
value of one field of one limit and prints a row for each.`,
	}
	fs := flags(cmd)
	var f replayFlags
	fs.StringSliceVar(&f.traffic, "traffic", nil, "recording files to replay (repeat the flag or separate with commas)")
	fs.StringVar(&f.baseline, "baseline-dir", "", "rules to compare with, replayed the same way (default: the recorded answers)")
	fs.BoolVar(&f.json, "json", false, "print the report as JSON")
	fs.Float64Var(&f.maxNew, "max-new-rejections", 0, "exit 1 when more than this percentage of the recorded calls would newly be rejected")
	fs.Float64Var(&f.scale, "scale", 1, "replay the traffic this many times as dense (2: what if it doubles)")
	fs.IntVar(&f.top, "top", record.DefaultTop, "clients listed per rule")
	fs.StringVar(&f.sweepDomain, "sweep-domain", "", "sweep: the domain of the limit to vary")
	fs.StringVar(&f.sweepRule, "sweep-rule", "", "sweep: the rule's path, as the recording and explain name it (api_key/endpoint=/search)")
	fs.StringVar(&f.sweepLimit, "sweep-limit", "", "sweep: the limit's name, for a rule of several limits")
	fs.StringVar(&f.sweepField, "sweep-field", "", "sweep: the field to vary: requests_per_unit or burst")
	fs.StringVar(&f.sweepValues, "sweep-values", "", "sweep: the values to try, such as 0,10,50")
	f.settings = app.Flags(fs)
	f.maxNewChanged = func() bool { return fs.Changed("max-new-rejections") }
	completeSettings(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError("replay takes no arguments; the rules are --config-dir's")
		}
		if len(f.traffic) == 0 {
			return usageError("--traffic names the recording files to replay")
		}
		return c.replay(cmd.Context(), f)
	}
	return cmd
}

func (c cli) replay(ctx context.Context, f replayFlags) error {
	s, err := app.LoadSettings(f.settings, c.getenv)
	if err != nil {
		return err
	}
	sweep, err := f.sweep()
	if err != nil {
		return err
	}
	if sweep != nil && f.maxNewChanged() {
		return usageError("--max-new-rejections gates one rule change; it does not go with --sweep-values")
	}
	if f.top < 1 {
		return usageError("--top must be at least 1")
	}
	if !(f.scale > 0) {
		return usageError("--scale must be above 0")
	}
	run := func(tune *descriptor.Tune) (*record.Report, error) {
		opts, err := app.ReplayOptions(s, s.ConfigDir, tune)
		if err != nil {
			return nil, err
		}
		if f.baseline != "" {
			if opts.Baseline, err = app.ReplayRules(s, f.baseline, nil); err != nil {
				return nil, fmt.Errorf("--baseline-dir: %w", err)
			}
		}
		opts.Scale, opts.Top = f.scale, f.top
		return replayFiles(ctx, f.traffic, opts)
	}
	if sweep == nil {
		rep, err := run(nil)
		if err != nil {
			return err
		}
		if f.json {
			err = writeJSON(c.stdout, rep)
		} else {
			err = rep.WriteText(c.stdout)
		}
		if err != nil {
			return err
		}
		if share := rep.NewRejectionShare(); f.maxNewChanged() && share > f.maxNew {
			return fmt.Errorf("%.2f%% of the recorded calls would newly be rejected (%d of %d), more than --max-new-rejections %g",
				share, rep.NewlyRejected, rep.Calls, f.maxNew)
		}
		return nil
	}
	var rows []sweepRow
	for _, v := range sweep.values {
		tune := sweep.tune
		tune.Value = v
		rep, err := run(&tune)
		if err != nil {
			return err
		}
		rows = append(rows, sweepRow{Value: v, Rule: rep.Row(tune.Domain, tune.Rule), Report: rep})
	}
	if f.json {
		return writeJSON(c.stdout, rows)
	}
	return writeSweep(c.stdout, sweep.tune, rows)
}

// sweepPlan is a sweep's limit and values.
type sweepPlan struct {
	tune   descriptor.Tune
	values []uint32
}

// sweep returns the sweep the flags ask for, or nil for none.
func (f replayFlags) sweep() (*sweepPlan, error) {
	if f.sweepDomain == "" && f.sweepRule == "" && f.sweepLimit == "" && f.sweepField == "" && f.sweepValues == "" {
		return nil, nil
	}
	if f.sweepDomain == "" || f.sweepRule == "" || f.sweepField == "" || f.sweepValues == "" {
		return nil, usageError("a sweep takes --sweep-domain, --sweep-rule, --sweep-field and --sweep-values (--sweep-limit for a rule of several limits)")
	}
	if f.sweepField != descriptor.TuneRequests && f.sweepField != descriptor.TuneBurst {
		return nil, usageError("--sweep-field %q: want %s or %s", f.sweepField, descriptor.TuneRequests, descriptor.TuneBurst)
	}
	p := &sweepPlan{tune: descriptor.Tune{Domain: f.sweepDomain, Rule: f.sweepRule, Limit: f.sweepLimit, Field: f.sweepField}}
	for _, s := range strings.Split(f.sweepValues, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
		if err != nil {
			return nil, usageError("--sweep-values: %q is not a whole number up to %d", s, uint32(1<<32-1))
		}
		p.values = append(p.values, uint32(v))
	}
	return p, nil
}

// replayFiles replays the recording files named.
func replayFiles(ctx context.Context, names []string, opts record.ReplayOptions) (*record.Report, error) {
	inputs := make([]record.Input, 0, len(names))
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		inputs = append(inputs, record.Input{Name: name, R: f})
	}
	return record.Replay(ctx, inputs, opts)
}

// sweepRow is one value of a sweep: the swept rule's row and the report.
type sweepRow struct {
	Value  uint32            `json:"value"`
	Rule   record.RuleReport `json:"rule"`
	Report *record.Report    `json:"report"`
}

func writeSweep(w io.Writer, tune descriptor.Tune, rows []sweepRow) error {
	limit := ""
	if tune.Limit != "" {
		limit = " limit " + tune.Limit
	}
	fmt.Fprintf(w, "Sweep of %s of %s %s%s; before is %s:\n\n", tune.Field, tune.Domain, tune.Rule, limit, before(rows))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.ToUpper(tune.Field)+"\tREQUESTS\tREJECTED\tNEWLY REJECTED\tNEWLY ADMITTED\tCALLS NEWLY REJECTED")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%d → %d\t%d\t%d\t%.2f%%\n", r.Value, r.Rule.Requests, r.Rule.RejectedBefore, r.Rule.RejectedAfter,
			r.Rule.NewlyRejected.Total, r.Rule.NewlyAdmitted.Total, r.Report.NewRejectionShare())
	}
	return tw.Flush()
}

// before says what the rows' before is.
func before(rows []sweepRow) string {
	if len(rows) > 0 && rows[0].Report.Baseline == record.BaselineReplayed {
		return "the baseline rules"
	}
	return "the recorded answers"
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}
