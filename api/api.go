// Package api holds the published descriptions of tollgate's interfaces,
// embedded so that the binary can print them.
//
// descriptor.schema.json is a JSON Schema (draft 2020-12) of the descriptor
// configuration files that package descriptor decodes. Editors that read
// JSON Schema validate and complete rule files with it: the files in
// config-examples/ name it on their first line, as
//
//	# yaml-language-server: $schema=../api/descriptor.schema.json
//
// The schema accepts every file the decoder accepts. It rejects what one
// mapping shows by itself, such as an unknown field, a bad unit or
// unlimited together with a unit; its top-level description lists the
// rejections it leaves to the decoder, which need the whole file, other
// files or arithmetic. The tests in this package hold both promises
// against the decoder's golden inputs.
//
// openapi.yaml is an OpenAPI 3.0 document of tollgate's whole HTTP API:
// the JSON check, envoyproxy/ratelimit's /json, the probes, the metrics,
// the admin API and the status page beside it. Its test holds it to the
// routes the HTTP handlers really serve, both ways, and validates real
// answers against it.
package api

import _ "embed"

//go:embed descriptor.schema.json
var descriptorSchema string

//go:embed openapi.yaml
var openAPI string

// OpenAPI returns the OpenAPI 3.0 document of the HTTP API, in YAML.
func OpenAPI() string { return openAPI }

// DescriptorSchema returns the JSON Schema of a descriptor configuration
// file.
func DescriptorSchema() string { return descriptorSchema }
