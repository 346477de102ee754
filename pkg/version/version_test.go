package version_test

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/version"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: rev},
			{Key: "vcs.modified", Value: modified},
		}
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name    string
		stamped string
		bi      *debug.BuildInfo
		want    version.Info
	}{
		{
			name: "no build information",
			want: version.Info{Version: "dev", Revision: version.Unknown, GoVersion: runtime.Version()},
		},
		{
			name:    "stamped, clean checkout",
			stamped: "v1.2.3",
			bi:      &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "false")},
			want:    version.Info{Version: "v1.2.3", Revision: rev, GoVersion: "go1.26.8"},
		},
		{
			name:    "stamped version wins over the module version",
			stamped: "v1.2.3-4-gabcdef-dirty",
			bi:      &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261125053106-0123456789ab+dirty"}, Settings: vcs(rev, "true")},
			want:    version.Info{Version: "v1.2.3-4-gabcdef-dirty", Revision: rev + "-modified", GoVersion: "go1.26.8"},
		},
		{
			name:    "go install module@version",
			stamped: "dev",
			bi:      &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"}},
			want:    version.Info{Version: "v1.4.0", Revision: version.Unknown, GoVersion: "go1.26.8"},
		},
		{
			name:    "devel build without VCS information",
			stamped: "dev",
			bi:      &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			want:    version.Info{Version: "dev", Revision: version.Unknown, GoVersion: "go1.26.8"},
		},
		{
			name:    "empty stamp",
			stamped: "",
			bi:      &debug.BuildInfo{GoVersion: "go1.26.8"},
			want:    version.Info{Version: "dev", Revision: version.Unknown, GoVersion: "go1.26.8"},
		},
		{
			name:    "modified without a revision stays unknown",
			stamped: "dev",
			bi:      &debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}},
			want:    version.Info{Version: "dev", Revision: version.Unknown, GoVersion: "go1.26.8"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := version.FromBuildInfo(tt.stamped, tt.bi); got != tt.want {
				t.Errorf("FromBuildInfo(%q, ...) = %+v, want %+v", tt.stamped, got, tt.want)
			}
		})
	}
}
