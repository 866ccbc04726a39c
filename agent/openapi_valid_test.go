package agent_test

import (
	"encoding/json"
	"os/exec"
	"strings"
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
	// A credential is exactly one of the three, as the agent takes it: a
	// client generated from the document says so too.
	cred := doc.Components.Schemas["Credential"].Value
	for body, ok := range map[string]bool{
		`{"phone":"9161234567"}`: true, `{"snils":"11223344595"}`: true, `{"thumbprint":"A1"}`: true,
		`{}`: false, `{"phone":"9161234567","snils":"11223344595"}`: false,
	} {
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		if err := cred.VisitJSON(v); (err == nil) != ok {
			t.Errorf("Credential %s: valid %v, want %v (%v)", body, err == nil, ok, err)
		}
	}
}

// TestOpenAPIVersionFollowsRelease: info.version is the release the
// CHANGELOG's top section names ("unreleased" until one is made), and the
// check goreleaser runs before a release refuses a tag that names another.
func TestOpenAPIVersionFollowsRelease(t *testing.T) {
	if out, err := exec.Command("../scripts/version-check.sh").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	out, err := exec.Command("../scripts/version-check.sh", "9.9.9").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "releasing 9.9.9") {
		t.Fatalf("a release the CHANGELOG does not name passed: %v %s", err, out)
	}
}
