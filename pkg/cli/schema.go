package cli

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/tollgatehq/tollgate/api"
)

// newSchemaCommand prints the JSON Schema of descriptor configuration
// files, for editors and CI linters that validate rule files, or with
// --openapi the OpenAPI document of the HTTP API.
func newSchemaCommand(c cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schema [--openapi]",
		Short: "Print the JSON Schema of descriptor configuration files",
		Args:  noArgs,
	}
	openAPI := flags(cmd).Bool("openapi", false, "print the OpenAPI 3 document of the HTTP API (YAML) instead")
	cmd.RunE = func(*cobra.Command, []string) error {
		doc := api.DescriptorSchema()
		if *openAPI {
			doc = api.OpenAPI()
		}
		_, err := io.WriteString(c.stdout, doc)
		return err
	}
	return cmd
}
