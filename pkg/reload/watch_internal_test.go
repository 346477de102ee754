package reload

import "testing"

func TestRelevant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"/etc/tollgate/api.yaml", true},
		{"/etc/tollgate/api.yml", true},
		{"/etc/tollgate/API.YAML", true},
		{"/etc/tollgate/..data", true},
		{"/etc/tollgate/..data_tmp", false},
		{"/etc/tollgate/..2026_03_01_12_00_00.123", false},
		{"/etc/tollgate/.api.yaml.swp", false},
		{"/etc/tollgate/.api.yaml", false},
		{"/etc/tollgate/api.yaml~", false},
		{"/etc/tollgate/4913", false},
		{"/etc/tollgate/README.md", false},
	} {
		if got := relevant(tc.name); got != tc.want {
			t.Errorf("relevant(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
