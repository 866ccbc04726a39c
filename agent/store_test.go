package agent_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/signagent/signagent/api"
	"github.com/signagent/signagent/internal/redistest"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/store"
)

// TestAgentSharedStore: an agent whose OpenID Connect records are in a
// shared store (a real redis-server) serves the profile from it, reports
// the store in /readyz, keeps serving a valid access token from memory
// while the store is down (readyz says so), and refuses a refresh then
// with 503 store_unavailable rather than risk a spent refresh token.
func TestAgentSharedStore(t *testing.T) {
	h := start(t, options{oidc: true, apiURL: "emu"})
	srv := redistest.Start(t)
	sealer, _ := store.NewSealer(bytes.Repeat([]byte{3}, 32))
	r, err := store.Open(store.Options{URL: srv.URL(), Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	shared := &oidc.Shared{S: r, Name: srv.URL()}
	rec, err := h.store.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	if err := shared.Save(rec); err != nil {
		t.Fatal(err)
	}
	h.store.Remove("default") // only the shared store has it now
	h.agent.SetOIDC(&oidc.Tokens{Store: shared, Client: func(*oidc.Record) (*oidc.Client, error) { return h.oidcClient(t), nil }})

	if resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "oidc", nil, ""); resp.StatusCode != 200 {
		t.Fatalf("through the shared store: %d %s", resp.StatusCode, body)
	}
	ready := func() (int, api.ReadyResponse) {
		code, _, body := raw(t, h.sock, "GET", "/readyz", "")
		var r api.ReadyResponse
		json.Unmarshal([]byte(body), &r)
		return code, r
	}
	if code, r := ready(); code != 200 || !r.Checks["store"].Ready || !r.Checks["oidc"].Ready {
		t.Fatalf("readyz: %d %+v", code, r)
	}
	srv.Stop()
	if resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "oidc", nil, ""); resp.StatusCode != 200 {
		t.Fatalf("a valid token while the store is down: %d %s", resp.StatusCode, body)
	}
	if code, r := ready(); code != 503 || r.Checks["store"].Ready || !strings.Contains(r.Checks["store"].Reason, "unavailable") {
		t.Fatalf("readyz with the store down: %d %+v", code, r)
	}
	code, _, body := raw(t, h.sock, "POST", "/v1/authorizations", `{"scheme":"oidc","refresh":true}`)
	if code != 503 || !strings.Contains(body, `"store_unavailable"`) {
		t.Fatalf("a refresh with the store down: %d %s", code, body)
	}
}
