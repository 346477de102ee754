package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

func newExplainCommand(c cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "explain [DIR] --domain D --descriptor k=v,k2=v2 [flags]",
		Short: "Show which rule a descriptor resolves to, and why",
		Long: `Show which rule of the configuration in DIR (default: --config-dir) a
descriptor resolves to, and how each entry matched: exact value, wildcard
pattern or the key's default. The configuration is loaded as serve and check
load it, with the same flags, environment and settings file.`,
		ValidArgsFunction: completeDir,
	}
	fs := flags(cmd)
	domain := fs.String("domain", "", "domain of the descriptor")
	desc := fs.String("descriptor", "", "descriptor entries: k=v,k2=v2")
	settings := app.Flags(fs)
	completeSettings(cmd)
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		tree, err := loadTree(settings, args, c.getenv)
		if err != nil {
			return err
		}
		entries, err := rlsclient.ParseDescriptor(*desc)
		if err != nil {
			return usageError("--descriptor: %v", err)
		}
		d := tree.Domain(*domain)
		if d == nil {
			return fmt.Errorf("domain %q is not configured (configured: %s); tollgate answers OK for every descriptor of an unknown domain",
				*domain, strings.Join(tree.Domains(), ", "))
		}
		fmt.Fprint(c.stdout, d.Explain(entries).String())
		return nil
	}
	return cmd
}
