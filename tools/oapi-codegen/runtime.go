// Package tools pins oapi-codegen (go.mod's tool directive) and the
// runtime a client generated from docs/openapi.yaml imports, apart from
// the agent's own go.mod. `go tool oapi-codegen` runs it (see
// docs/partners.md); cmd/signagent's TestOpenAPIGeneratesGoClient builds
// a generated client against these requirements.
package tools

import _ "github.com/oapi-codegen/runtime" // imported by every generated client
