package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tollgatehq/tollgate/pkg/version"
)

func newVersionCommand(c cli, info version.Info) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this build",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := io.WriteString(c.stdout, versionText(info))
			return err
		},
	}
}

// versionText is what `tollgate version` prints.
func versionText(info version.Info) string {
	return fmt.Sprintf("tollgate %s\nrevision: %s\ngo: %s\n", info.Version, info.Revision, info.GoVersion)
}
