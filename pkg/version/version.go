// Package version holds the version that a build stamps into tollgate.
//
// `make build` and the Dockerfile set it with the linker:
//
//	go build -ldflags "-X github.com/tollgatehq/tollgate/pkg/version.Version=v1.2.3" ./cmd/tollgate
//
// A build without the flag (go run, go test, go install) reports "dev".
package version

// Version is the release this binary was built from, as `git describe`
// printed it, or "dev". It is a variable only so that the linker can set
// it; nothing assigns it at run time.
var Version = "dev"
