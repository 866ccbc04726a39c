package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/signagent/signagent/emulator"
)

// loadOpenAPI loads docs/openapi.yaml with kin-openapi, references
// resolved.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatalf("docs/openapi.yaml does not load: %v", err)
	}
	return doc
}

// documentedExample is one response's example: the operation, the status
// ("default" for the proxy's pass-through), the media type and the value.
type documentedExample struct {
	op, status, media string
	value             any
	schema            *openapi3.Schema
}

// openAPIExamples lists every response of every operation; a response
// without content or a media type without an example is an error.
func openAPIExamples(t *testing.T, doc *openapi3.T) map[string]documentedExample {
	t.Helper()
	out := map[string]documentedExample{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status, ref := range op.Responses.Map() {
				key := method + " " + path + " " + status
				if len(ref.Value.Content) == 0 {
					t.Errorf("%s: the response has no content, so no example", key)
				}
				for media, mt := range ref.Value.Content {
					if mt.Example == nil {
						t.Errorf("%s %s: no example", key, media)
						continue
					}
					out[key] = documentedExample{op: method + " " + path, status: status, media: media, value: mt.Example, schema: mt.Schema.Value}
				}
			}
		}
	}
	return out
}

// TestOpenAPIExamplesValid: every response of docs/openapi.yaml has an
// example, and each is valid against its own schema (the Error examples'
// codes are in the enum, required fields are there).
func TestOpenAPIExamplesValid(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	examples := openAPIExamples(t, doc)
	for key, ex := range examples {
		if err := ex.schema.VisitJSON(ex.value); err != nil {
			t.Errorf("%s: the example is not valid against its schema: %v", key, err)
		}
	}
	if len(examples) < 60 {
		t.Errorf("%d examples; every operation's responses should have them", len(examples))
	}
}

// liveAnswer is what the agent answered a request, under the documented
// response it is an instance of.
type liveAnswer struct {
	key    string // METHOD PATH STATUS as in openAPIExamples
	status int
	body   string
}

// sameShape reports how live differs from example in fields and JSON
// types: objects have the same keys (each compared in turn), arrays are
// not empty and each live element has the shape of the example's first.
func sameShape(where string, example, live any) []string {
	switch e := example.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: an object in the example, %T in the answer", where, live)}
		}
		var diffs []string
		for k, v := range e {
			if lv, ok := l[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s.%s: in the example, not in the answer", where, k))
			} else {
				diffs = append(diffs, sameShape(where+"."+k, v, lv)...)
			}
		}
		for k := range l {
			if _, ok := e[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s.%s: in the answer, not in the example", where, k))
			}
		}
		return diffs
	case []any:
		l, ok := live.([]any)
		if !ok || len(e) == 0 || len(l) == 0 {
			return []string{fmt.Sprintf("%s: an array of %d in the example, %T (%v) in the answer", where, len(e), live, live)}
		}
		var diffs []string
		for i, lv := range l {
			diffs = append(diffs, sameShape(fmt.Sprintf("%s[%d]", where, i), e[0], lv)...)
		}
		return diffs
	}
	if fmt.Sprintf("%T", example) != fmt.Sprintf("%T", live) {
		return []string{fmt.Sprintf("%s: %T in the example, %T in the answer", where, example, live)}
	}
	return nil
}

// TestOpenAPIExamplesMatchAgent asks a running agent (against the
// emulator) for an instance of each documented response and checks that
// the document's example has the same fields and JSON types as the
// agent's answer. One answer is not asked for and is held to its schema
// alone (TestOpenAPIExamplesValid): 429 queue_full, which takes a token
// queue kept full; the test fails when any other example has no live
// answer.
func TestOpenAPIExamplesMatchAgent(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	examples := openAPIExamples(t, doc)
	// TCP callers may only reach what the partner bed's routes leave them:
	// nothing, so that a right bearer token on TCP gets 403.
	b := newPartnerBed(t, "--routes", "tcp=", "--request-deadline", "3s")
	ident := map[string]string{"Signagent-Identity": "trusted phone=" + partnerPhone + " serviceUserId=" + partnerUser}
	ask := func(key, method, path, body string, header map[string]string) liveAnswer {
		t.Helper()
		code, text := b.doWith(method, path, body, header)
		return liveAnswer{key: key, status: code, body: text}
	}
	session := `{"phone":"` + partnerPhone + `","serviceUserId":"` + partnerUser + `"}`
	answers := []liveAnswer{
		ask("POST /v1/signatures 200", "POST", "/v1/signatures", `{"phone":"`+partnerPhone+`"}`, nil),
		ask("POST /v1/sessions 200", "POST", "/v1/sessions", session, nil),
		ask("POST /v1/authorizations 200", "POST", "/v1/authorizations",
			`{"scheme":"legacy","by":"sid","credential":{"phone":"`+partnerPhone+`"},"serviceUserId":"`+partnerUser+`"}`, nil),
		ask("GET /v1/service/{method} default", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "", ident),
		ask("POST /v1/service/{method} default", "POST", "/v1/service/GetMyOrganizations?autoRegister=false", "", ident),
		ask("GET /v1/identities 200", "GET", "/v1/identities", "", nil),
		ask("POST /v1/links 200", "POST", "/v1/links", `{"serviceUserId":"crm-43","phone":"`+partnerPhone+`"}`, nil),
		ask("DELETE /v1/sessions 200", "DELETE", "/v1/sessions?phone="+partnerPhone+"&serviceUserId="+partnerUser, "", nil),
		ask("GET /healthz 200", "GET", "/healthz", "", nil),
		ask("GET /livez 200", "GET", "/livez", "", nil),
		ask("GET /readyz 200", "GET", "/readyz", "", nil),
		ask("GET /metrics 200", "GET", "/metrics", "", nil),
		ask("POST /v1/signatures 400", "POST", "/v1/signatures", `{"phone":`, nil),
		ask("POST /v1/signatures 413", "POST", "/v1/signatures", `{"phone":"`+strings.Repeat("9", 70000)+`"}`, nil),
		ask("POST /v1/sessions 422", "POST", "/v1/sessions", `{"phone":"`+partnerPhone+`","serviceUserId":"crm-unlinked"}`, nil),
		ask("GET /v1/service/{method} 405", "DELETE", "/v1/service/GetMyOrganizations", "", ident),
		ask("GET /v1/service/{method} 409", "GET", "/v1/service/GetMyOrganizations", "", map[string]string{"Signagent-Identity": "oidc profile=crm"}),
	}
	// 401 and 403 over TCP: no bearer token, then the right one on a route
	// closed to TCP.
	bearer, err := os.ReadFile(b.bearer)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ key, auth string }{{"POST /v1/signatures 401", ""}, {"POST /v1/signatures 403", "Bearer " + strings.TrimSpace(string(bearer))}} {
		req, _ := http.NewRequest("POST", b.url+"/v1/signatures", strings.NewReader(`{"phone":"`+partnerPhone+`"}`))
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers = append(answers, liveAnswer{key: tc.key, status: resp.StatusCode, body: string(text)})
	}
	// 502: the service fails every attempt of a session not cached; 504:
	// the service answers a business call after the request deadline.
	b.emu.InjectFaults("authenticate-by-truster", emulator.Fault{Status: 500}, emulator.Fault{Status: 500}, emulator.Fault{Status: 500})
	answers = append(answers, ask("POST /v1/sessions 502", "POST", "/v1/sessions", `{"phone":"`+partnerPhone+`","serviceUserId":"crm-43"}`, nil))
	b.emu.InjectFaults("GetMyOrganizations", emulator.Fault{Delay: 5 * time.Second})
	answers = append(answers, ask("GET /v1/service/{method} 504", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "", ident))

	// 503: an agent whose token is not there (it waits for it): not ready,
	// and its signatures are answered token_not_ready.
	dir := shortDir(t)
	sock := filepath.Join(dir, "w.sock")
	waiting := startServe(t, signagent(t, append(serveEnv(b.tk), "SIGNAGENT_TOKEN_LABEL=crm-token", "XDG_STATE_HOME="+dir,
		"SIGNAGENT_DEVELOPER_KEY=testClient-0a1b2c3d4e"), "serve",
		"--listen", "unix:"+sock, "--audit-log", os.DevNull, "--trusted-url", b.emu.URL(), "--business-url", b.emu.URL(),
		"--log-level", "error"), sock)
	code, text := waiting.do("GET", "/readyz", "")
	answers = append(answers, liveAnswer{"GET /readyz 503", code, text})
	code, text = waiting.do("POST", "/v1/signatures", `{"phone":"`+partnerPhone+`"}`)
	answers = append(answers, liveAnswer{"POST /v1/signatures 503", code, text})

	// Each answer against the example of its documented response; the
	// shared error responses are the same example under every operation.
	covered := map[string]bool{}
	for _, a := range answers {
		parts := strings.Fields(a.key)
		if parts[2] != "default" && strconv.Itoa(a.status) != parts[2] {
			t.Errorf("%s: the agent answered %d: %s", a.key, a.status, a.body)
			continue
		}
		ex, ok := examples[a.key]
		if !ok {
			t.Errorf("%s: no such documented response", a.key)
			continue
		}
		for key, other := range examples {
			if other.status == ex.status && fmt.Sprint(other.value) == fmt.Sprint(ex.value) {
				covered[key] = true
			}
		}
		if ex.media == "text/plain" {
			for _, line := range strings.Split(strings.TrimSpace(ex.value.(string)), "\n") {
				if !strings.Contains(a.body, line) {
					t.Errorf("%s: the example's line %q is not in the agent's answer", a.key, line)
				}
			}
			continue
		}
		var live any
		if err := json.Unmarshal([]byte(a.body), &live); err != nil {
			t.Errorf("%s: the answer is not JSON: %v: %s", a.key, err, a.body)
			continue
		}
		for _, d := range sameShape("answer", ex.value, live) {
			t.Errorf("%s: %s\nanswer: %s", a.key, d, a.body)
		}
	}
	var missing []string
	for key, ex := range examples {
		if !covered[key] && ex.status != "429" {
			missing = append(missing, key)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("examples no answer of the agent was compared with:\n%s", strings.Join(missing, "\n"))
	}
}
