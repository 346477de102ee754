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
exactly what serve accepts, values files included, and the shadow rules of
--shadow-config-dir when it is set. Prints every error with file, line and
descriptor path, and exits 1 if there is any.`,
		ValidArgsFunction: completeDir,
	}
	settings := app.Flags(flags(cmd))
	completeSettings(cmd)
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		tree, err := loadTree(settings, args, c.getenv)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "ok: %s\n", summary(tree))
		// The shadow rules, when set, are judged too, as serve loads them.
		s, err := app.LoadSettings(settings, c.getenv)
		if err != nil || s.Shadow.ConfigDir == "" {
			return err
		}
		shadow, err := app.ReplayRules(s, s.Shadow.ConfigDir, nil)
		if err != nil {
			return fmt.Errorf("shadow rules (--shadow-config-dir %s): %w", s.Shadow.ConfigDir, err)
		}
		fmt.Fprintf(c.stdout, "shadow rules ok: %s\n", summary(shadow))
		return nil
	}
	return cmd
}

// summary describes a loaded rule set: its domains, values files and
// hash.
func summary(tree *descriptor.Tree) string {
	lists := ""
	switch n := len(tree.ValuesFiles()); n {
	case 0:
	case 1:
		lists = "1 values file, "
	default:
		lists = fmt.Sprintf("%d values files, ", n)
	}
	return fmt.Sprintf("%d domains, %shash %s", len(tree.Domains()), lists, tree.Hash())
}
