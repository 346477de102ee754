package descriptor

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

func TestDiffDomains(t *testing.T) {
	base := map[string]string{
		"api.yaml": `domain: api
descriptors:
  - key: api_key
    values_file: revoked.txt
    action: deny
  - key: api_key
    descriptors:
      - key: endpoint
        value: /search
        rate_limit: {unit: minute, requests_per_unit: 30}
`,
		"revoked.txt": "sk_1\nsk_2\n",
		"web.yaml":    "domain: web\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
		"admin.yaml":  "domain: admin\ndescriptors:\n  - key: user\n    action: allow\n",
	}
	// edit returns base with the named files replaced, or removed when
	// their new content is "".
	edit := func(files map[string]string) map[string]string {
		out := maps.Clone(base)
		for name, data := range files {
			if data == "" {
				delete(out, name)
				continue
			}
			out[name] = data
		}
		return out
	}
	load := func(files map[string]string) *Tree {
		if files == nil {
			return nil
		}
		fsys := fstest.MapFS{}
		for name, data := range files {
			fsys[name] = &fstest.MapFile{Data: []byte(data)}
		}
		tree, err := LoadFS(fsys, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return tree
	}
	tests := []struct {
		name                    string
		before, after           map[string]string
		added, removed, changed []string
	}{
		{name: "both nil"},
		{name: "first tree", after: base, added: []string{"admin", "api", "web"}},
		{name: "no tree after", before: base, removed: []string{"admin", "api", "web"}},
		{name: "same", before: base, after: base},
		{
			name: "file renamed and reformatted", before: base,
			after: edit(map[string]string{
				"web.yaml": "",
				"www.yml":  "# web\ndomain: web\ndescriptors:\n  - key: ip\n    rate_limit:\n      unit: SECOND\n      requests_per_unit: 5\n",
			}),
		},
		{
			name: "nested value", before: base,
			after:   edit(map[string]string{"api.yaml": strings.Replace(base["api.yaml"], "/search", "/find", 1)}),
			changed: []string{"api"},
		},
		{
			name: "values file", before: base,
			after:   edit(map[string]string{"revoked.txt": "sk_1\nsk_2\nsk_3\n"}),
			changed: []string{"api"},
		},
		{
			name: "values file reordered", before: base,
			after: edit(map[string]string{"revoked.txt": "sk_2\nsk_1\n"}),
		},
		{
			name: "limit", before: base,
			after:   edit(map[string]string{"web.yaml": strings.Replace(base["web.yaml"], "requests_per_unit: 5", "requests_per_unit: 6", 1)}),
			changed: []string{"web"},
		},
		{
			name: "domain defaults", before: base,
			after:   edit(map[string]string{"web.yaml": strings.Replace(base["web.yaml"], "domain: web\n", "domain: web\ndefaults: {algorithm: fixed_window}\n", 1)}),
			changed: []string{"web"},
		},
		{
			name: "domain renamed", before: base,
			after: edit(map[string]string{"web.yaml": strings.Replace(base["web.yaml"], "domain: web", "domain: www", 1)}),
			added: []string{"www"}, removed: []string{"web"},
		},
		{
			name: "added, removed and changed", before: base,
			after: edit(map[string]string{
				"admin.yaml": "",
				"b.yaml":     "domain: b\n",
				"z.yaml":     "domain: z\n",
				"api.yaml":   base["api.yaml"] + "  - key: tier\n",
				"web.yaml":   strings.Replace(base["web.yaml"], "second", "minute", 1),
			}),
			added: []string{"b", "z"}, removed: []string{"admin"}, changed: []string{"api", "web"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			added, removed, changed := DiffDomains(load(tt.before), load(tt.after))
			// Nil, not empty, when there are none, as DiffDomains documents.
			if !slices.Equal(added, tt.added) || (added == nil) != (tt.added == nil) ||
				!slices.Equal(removed, tt.removed) || (removed == nil) != (tt.removed == nil) ||
				!slices.Equal(changed, tt.changed) || (changed == nil) != (tt.changed == nil) {
				t.Errorf("DiffDomains() = added %q, removed %q, changed %q; want %q, %q, %q",
					added, removed, changed, tt.added, tt.removed, tt.changed)
			}
		})
	}
}
