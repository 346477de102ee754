// Command tollgate is a rate-limit service for Envoy. See the README.
package main

import (
	"os"

	"github.com/tollgatehq/tollgate/pkg/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
