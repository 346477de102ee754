package app

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/tollgatehq/tollgate/api"
)

// newSchemaCommand prints the JSON Schema of descriptor configuration
// files, for editors and CI linters that validate rule files.
func newSchemaCommand(c cli) *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of descriptor configuration files",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := io.WriteString(c.stdout, api.DescriptorSchema())
			return err
		},
	}
}
