package version

// This file reads the rest of what `tollgate version`, /debug/config and
// the tollgate_build_info metric report. Read takes Version when the linker
// stamped it; otherwise the module version that the go command recorded
// (`go install ...@v1.2.3` records v1.2.3; a build in a git checkout, with
// VCS stamping on, a pseudo-version), else "dev". The commit comes from
// Revision when the linker stamped it, else from the build's VCS stamp.

import (
	"runtime"
	"runtime/debug"
)

// Revision is the commit the binary was built from when the linker sets it
// as it sets Version. It wins over the build's VCS stamp: builds without
// the .git directory, such as most container builds, have none.
var Revision = ""

// Unknown stands for a revision that the build did not record, as in a
// build outside a git checkout, with -buildvcs=false, or under go test.
const Unknown = "unknown"

// Info describes one build.
type Info struct {
	// Version is the linker-stamped Version, else the module version the
	// go command recorded, else "dev".
	Version string
	// Revision is the commit the build came from, with "-modified"
	// appended when the work tree had uncommitted changes, or Unknown.
	Revision string
	// GoVersion is the Go toolchain that built the binary, as go1.26.8.
	GoVersion string
}

// Read returns the running binary's Info.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	info := FromBuildInfo(Version, bi)
	if Revision != "" {
		info.Revision = Revision
	}
	return info
}

// FromBuildInfo returns the Info of a build whose linker-stamped Version
// is stamped and whose recorded build information is bi, which may be nil
// when the binary carries none.
func FromBuildInfo(stamped string, bi *debug.BuildInfo) Info {
	info := Info{Version: stamped, Revision: Unknown, GoVersion: runtime.Version()}
	if info.Version == "" {
		info.Version = "dev"
	}
	if bi == nil {
		return info
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	if info.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && info.Revision != Unknown {
		info.Revision += "-modified"
	}
	return info
}
