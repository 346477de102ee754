package app

import (
	"io"

	"github.com/tollgatehq/tollgate/api"
)

// schema prints the JSON Schema of descriptor configuration files, for
// editors and CI linters that validate rule files.
func schema(args []string, stdout io.Writer) error {
	fs := newFlagSet("schema")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected arguments %q", fs.Args())
	}
	_, err := io.WriteString(stdout, api.DescriptorSchema())
	return err
}
