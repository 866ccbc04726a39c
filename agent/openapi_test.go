package agent_test

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agent/proxy"
	"github.com/signagent/signagent/agentapi"
)

type openapiDoc struct {
	Paths      map[string]map[string]any `yaml:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]any `yaml:"properties"`
			AllOf      []struct {
				Ref        string         `yaml:"$ref"`
				Properties map[string]any `yaml:"properties"`
			} `yaml:"allOf"`
		} `yaml:"schemas"`
	} `yaml:"components"`
}

// TestOpenAPIMatchesCode checks docs/openapi.yaml against the agent: the same
// routes, the same JSON fields in each schema, and every error code.
func TestOpenAPIMatchesCode(t *testing.T) {
	b, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc openapiDoc
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" || method == "summary" || method == "description" {
				continue // path-level fields, not operations
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	routes := slices.Clone(agent.Routes)
	sort.Strings(documented)
	sort.Strings(routes)
	if !slices.Equal(documented, routes) {
		t.Fatalf("documented routes %v\ncode's routes       %v", documented, routes)
	}

	for name, typ := range map[string]any{
		"Credential": agentapi.Credential{}, "SignatureRequest": agentapi.SignatureRequest{}, "SignatureResponse": agentapi.SignatureResponse{},
		"SessionRequest": agentapi.SessionRequest{}, "SessionResponse": agentapi.SessionResponse{}, "DropResponse": agentapi.DropResponse{},
		"LinkRequest": agentapi.LinkRequest{}, "LinkResult": agentapi.LinkResponse{}, "HealthResponse": agentapi.HealthResponse{},
		"TokenState": agentapi.TokenState{}, "ReadyResponse": agentapi.ReadyResponse{}, "Check": agentapi.Check{},
	} {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s is not documented", name)
			continue
		}
		documented := map[string]bool{}
		for p := range s.Properties {
			documented[p] = true
		}
		for _, part := range s.AllOf {
			if part.Ref != "" {
				for p := range doc.Components.Schemas[strings.TrimPrefix(part.Ref, "#/components/schemas/")].Properties {
					documented[p] = true
				}
			}
			for p := range part.Properties {
				documented[p] = true
			}
		}
		fields := jsonFields(reflect.TypeOf(typ))
		for _, f := range fields {
			if !documented[f] {
				t.Errorf("schema %s lacks field %s", name, f)
			}
			delete(documented, f)
		}
		for f := range documented {
			t.Errorf("schema %s documents %s, which the code does not have", name, f)
		}
	}

	for _, code := range []string{agentapi.CodeBadInput, agentapi.CodeUnauthorized, agentapi.CodeForbidden, agentapi.CodeNotFound, agentapi.CodeMethodNotAllowed,
		agentapi.CodeTooLarge, agentapi.CodeServiceRefused, agentapi.CodeQueueFull, agentapi.CodeInternal, agentapi.CodeServiceError, agentapi.CodeServiceUnreachable,
		agentapi.CodeTokenNotReady, agentapi.CodeNotConfigured, agentapi.CodeServiceTimeout, agentapi.CodeTokenTimeout} {
		if !regexp.MustCompile(`[\s\[]` + code + `[,\]]`).Match(b) {
			t.Errorf("error code %s is not in the document", code)
		}
	}
}

// jsonFields lists a struct's JSON names, embedded structs flattened.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// TestOpenAPIHeaders: the headers the agent reads and writes besides
// Authorization are declared: X-Request-Id as every path's parameter and
// on the error answers, Signagent-Error on the answers the proxy writes
// itself, by the names the code uses.
func TestOpenAPIHeaders(t *testing.T) {
	b, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths      map[string]map[string]any `yaml:"paths"`
		Components struct {
			Parameters map[string]struct {
				Name string `yaml:"name"`
				In   string `yaml:"in"`
			} `yaml:"parameters"`
			Responses map[string]struct {
				Headers map[string]any `yaml:"headers"`
			} `yaml:"responses"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if p := doc.Components.Parameters["RequestID"]; p.Name != agent.RequestIDHeader || p.In != "header" {
		t.Fatalf("parameter RequestID = %+v, want header %s", p, agent.RequestIDHeader)
	}
	for path, item := range doc.Paths {
		if !strings.Contains(fmt.Sprint(item["parameters"]), "#/components/parameters/RequestID") {
			t.Errorf("path %s does not take %s", path, agent.RequestIDHeader)
		}
	}
	for name, r := range doc.Components.Responses {
		for _, h := range []string{agent.RequestIDHeader, proxy.ErrorHeader} {
			if _, ok := r.Headers[h]; !ok {
				t.Errorf("response %s does not declare %s", name, h)
			}
		}
	}
}
