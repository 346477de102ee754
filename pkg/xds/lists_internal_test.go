package xds

import (
	"testing"
	"testing/fstest"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// TestBuildRefusesValuesFiles checks that Build's loader refuses a
// values_file with a clear error, even one whose file is at hand: rules
// over xDS have no configuration directory.
func TestBuildRefusesValuesFiles(t *testing.T) {
	fsys := fstest.MapFS{
		dir + "/r.yaml": {Data: []byte("domain: d\ndescriptors:\n  - key: k\n    values_file: deny.txt\n    action: deny\n")},
		"deny.txt":      {Data: []byte("v\n")},
	}
	if _, err := descriptor.LoadFS(fsys, descriptor.Options{}); err != nil {
		t.Fatalf("without the refusal: %v", err)
	}
	_, err := descriptor.LoadFS(fsys, loadOptions(descriptor.Options{MaxPatterns: 7}))
	want := "xds/r.yaml:4: k in deny.txt: values_file: rules from xDS cannot name files; list the values as descriptors"
	if err == nil || err.Error() != want {
		t.Errorf("LoadFS = %v, want %s", err, want)
	}
	if got := loadOptions(descriptor.Options{MaxPatterns: 7}).MaxPatterns; got != 7 {
		t.Errorf("loadOptions dropped MaxPatterns: %d", got)
	}
}
