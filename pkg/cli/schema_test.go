package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/api"
)

func TestSchema(t *testing.T) {
	code, out, errOut := runMain("schema")
	if code != 0 || errOut != "" {
		t.Fatalf("schema: exit %d, stderr %q", code, errOut)
	}
	if out != api.DescriptorSchema() {
		t.Errorf("schema printed %d bytes, not the %d of api.DescriptorSchema", len(out), len(api.DescriptorSchema()))
	}
	var doc struct {
		Schema string `json:"$schema"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("schema output is not JSON: %v", err)
	}
	if want := "https://json-schema.org/draft/2020-12/schema"; doc.Schema != want {
		t.Errorf("$schema %q, want %q", doc.Schema, want)
	}
}

func TestSchemaOpenAPI(t *testing.T) {
	code, out, errOut := runMain("schema", "--openapi")
	if code != 0 || errOut != "" || out != api.OpenAPI() || !strings.HasPrefix(out, "openapi: 3.") {
		t.Errorf("schema --openapi: exit %d, stderr %q, %d bytes; want api.OpenAPI's %d", code, errOut, len(out), len(api.OpenAPI()))
	}
}

func TestSchemaUsage(t *testing.T) {
	code, _, errOut := runMain("schema", "extra")
	if want := "tollgate schema: usage: unexpected arguments [\"extra\"]\n"; code != 2 || errOut != want {
		t.Errorf("schema extra: exit %d, stderr %q; want exit 2, stderr %q", code, errOut, want)
	}
	code, out, _ := runMain("help")
	if want := "\n  schema      "; code != 0 || !strings.Contains(out, want) {
		t.Errorf("help: exit %d, lacks %q:\n%s", code, want, out)
	}
}
