package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// loadTree loads the descriptor configuration for check and explain with
// the settings and through the loader of serve. settings are the parsed
// settings flags; the one optional argument is the configuration
// directory, and stands for --config-dir.
func loadTree(settings *pflag.FlagSet, args []string, getenv func(string) string) (*descriptor.Tree, error) {
	switch len(args) {
	case 0:
	case 1:
		if err := settings.Set("config-dir", args[0]); err != nil {
			return nil, err
		}
	default:
		return nil, usageError("want at most one configuration directory, got %d arguments", len(args))
	}
	s, err := app.LoadSettings(settings, getenv)
	if err != nil {
		return nil, err
	}
	return app.LoadRules(s)
}

func newCheckCommand(c cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check [DIR] [flags]",
		Short: "Validate a descriptor configuration directory as serve would load it",
		Long: `Validate the descriptor configuration in DIR (default: --config-dir) with
serve's flags, TOLLGATE_* environment and --settings file, so that it accepts
exactly what serve accepts, values files included. Prints every error with
file, line and descriptor path, and exits 1 if there is any.`,
		ValidArgsFunction: completeDir,
	}
	settings := app.Flags(flags(cmd))
	completeSettings(cmd)
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		tree, err := loadTree(settings, args, c.getenv)
		if err != nil {
			return err
		}
		lists := ""
		switch n := len(tree.ValuesFiles()); n {
		case 0:
		case 1:
			lists = "1 values file, "
		default:
			lists = fmt.Sprintf("%d values files, ", n)
		}
		fmt.Fprintf(c.stdout, "ok: %d domains, %shash %s\n", len(tree.Domains()), lists, tree.Hash())
		return nil
	}
	return cmd
}
