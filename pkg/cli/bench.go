package cli

import (
	"encoding/json"
	"errors"

	"github.com/spf13/cobra"

	"github.com/tollgatehq/tollgate/pkg/loadgen"
)

func newBenchCommand(c cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench --addr HOST:PORT --domain D --descriptor 'api_key=k{key}' [-c N] [--rate R] [flags]",
		Short: "Load any RateLimitService and print JSON results",
		Args:  noArgs,
	}
	var opts loadgen.Options
	opts.Flags(flags(cmd))
	_ = cmd.RegisterFlagCompletionFunc("dist",
		cobra.FixedCompletions([]string{"uniform", "zipf"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		res, err := loadgen.Run(cmd.Context(), opts)
		if errors.Is(err, loadgen.ErrInvalidOptions) {
			return usageError("%v", err)
		}
		if res != nil {
			enc := json.NewEncoder(c.stdout)
			enc.SetIndent("", "  ")
			if encErr := enc.Encode(res); encErr != nil && err == nil {
				err = encErr
			}
		}
		return err
	}
	return cmd
}
