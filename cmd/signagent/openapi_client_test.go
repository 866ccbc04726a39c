package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOpenAPIGeneratesGoClient: docs/openapi.yaml generates a Go client
// with oapi-codegen (pinned in tools/oapi-codegen/go.mod, a module of its
// own so that the agent's go.mod does not carry it) and the client
// compiles. Schema names must not clash with the names oapi-codegen gives
// each operation's answer (<OperationId>Response): LinkResponse and
// IdentitiesResponse once did.
func TestOpenAPIGeneratesGoClient(t *testing.T) {
	t.Parallel()
	tools, err := filepath.Abs("../../tools/oapi-codegen")
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := filepath.Abs("../../docs/openapi.yaml")
	dir := t.TempDir()
	gen := filepath.Join(dir, "client.gen.go")
	goCmd := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	goCmd(tools, "tool", "oapi-codegen", "-generate", "types,client", "-package", "agentapi", "-o", gen, spec)

	// The client builds in a module of the tools module's requirements
	// (oapi-codegen's runtime), as a partner's would.
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(tools, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "go.mod" {
			b = regexp.MustCompile(`(?m)^module .*$`).ReplaceAll(b, []byte("module example.com/partner"))
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd(dir, "vet", ".")

	src, err := os.ReadFile(gen)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"type LinkResult struct", "type IdentityList struct", "type LinkResponse struct", "type IdentitiesResponse struct",
		"func (c *ClientWithResponses) SignWithResponse(", "func (c *ClientWithResponses) CreateSessionWithResponse(",
		"func (c *ClientWithResponses) AuthorizeWithResponse(", "func (c *ClientWithResponses) ProxyGetWithResponse("} {
		if !strings.Contains(string(src), want) {
			t.Errorf("the generated client has no %q", want)
		}
	}
}
