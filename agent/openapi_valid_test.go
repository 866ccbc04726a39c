package agent_test

import (
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestOpenAPIValidates: docs/openapi.yaml is a valid OpenAPI 3 document
// (kin-openapi's loader and Validate: what client generators read), not
// only YAML that matches the code; every operation has an operationId.
func TestOpenAPIValidates(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatalf("docs/openapi.yaml does not load: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("docs/openapi.yaml is not valid OpenAPI: %v", err)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.OperationID == "" {
				t.Errorf("%s %s has no operationId", method, path)
			}
		}
	}
}
