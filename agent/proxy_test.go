package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agent/access"
	"github.com/signagent/signagent/agent/proxy"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/schemes"
)

// call sends a request to the agent's socket as a partner system would;
// path is sent as it is (no cleaning, no escaping).
func (h *harness) call(t testing.TB, method, path, identity string, header http.Header, body string) (*http.Response, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.sock)
	}}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(method, "http://agent", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = path
	for k, v := range header {
		req.Header[k] = v
	}
	if identity != "" {
		req.Header.Set(proxy.IdentityHeader, identity)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const (
	aliceOIDC    = "oidc profile=default"
	aliceLegacy  = "legacy login=alice@example.com"
	aliceTrusted = "trusted snils=11223344595 serviceUserId=crm-42"
)

// TestProxyBusinessCalls: the same business calls through the proxy for
// alice under each scheme, answered as the service answered them.
func TestProxyBusinessCalls(t *testing.T) {
	h := start(t, options{legacy: true, oidc: true, apiURL: "emu"})
	for _, id := range []string{aliceOIDC, aliceLegacy, aliceTrusted, "legacy certificate"} {
		t.Run(strings.Fields(id)[0]+"-"+strings.Fields(id)[1], func(t *testing.T) {
			resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", id, nil, "")
			if resp.StatusCode != 200 || !strings.Contains(body, `"FullName":"Horns and Hooves LLC"`) || strings.Contains(body, "Someone Else") ||
				!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
			}
			resp, _ = h.call(t, "GET", "/v1/service/GetMyEmployee?boxId="+myBox, id, nil, "")
			if resp.StatusCode != 200 {
				t.Fatalf("own box: %d", resp.StatusCode)
			}
			// 403, 404 and 400 come back as the service sent them.
			for _, c := range []struct {
				query, code, text string
				status            int
			}{
				{"?boxId=" + otherBox, emulator.CodeBoxAccessDenied, "Access to Box [" + otherBox + "] is denied", 403},
				{"?boxId=00000000000000000000000000000001@box.example", emulator.CodeBoxNotFound, "", 404},
				{"", "Http.BadRequest", "Could not get boxId from query param", 400},
			} {
				resp, body := h.call(t, "GET", "/v1/service/GetMyEmployee"+c.query, id, nil, "")
				if resp.StatusCode != c.status || !strings.Contains(body, c.text) || resp.Header.Get(legacy.ErrorCodeHeader) != c.code {
					t.Errorf("%q: %d %q %q", c.query, resp.StatusCode, resp.Header.Get(legacy.ErrorCodeHeader), body)
				}
			}
		})
	}
	if v := h.metric(t, `signagent_service_calls_total{method="GetMyEmployee",status="403"}`); v != "4" {
		t.Errorf("403s counted: %s", v)
	}
	if v := h.metric(t, `signagent_service_calls_total{method="GetMyOrganizations",status="200"}`); v != "4" {
		t.Errorf("200s counted: %s", v)
	}
	// The audit log: who called what for whom, and no secret.
	audit := h.audit.String()
	for _, want := range []string{`"call":"GET /GetMyEmployee"`, `"serviceStatus":403`, `"identity":"profile default (u1)"`,
		`"identity":"password alice@example.com"`, `"identity":"sid trusted snils=*******4595 serviceUserId=crm-42"`} {
		if !strings.Contains(audit, want) {
			t.Errorf("audit lacks %s:\n%s", want, audit)
		}
	}
	if strings.Contains(audit, "?boxId") {
		t.Error("the audit log holds a query")
	}
	for _, secret := range []string{"Bearer ", "ddauth_token", alicePassword} {
		if strings.Contains(audit+h.logs.String(), secret) {
			t.Errorf("audit or log holds %q", secret)
		}
	}
}

// TestProxyExpiredBetweenCalls: a token the service stops taking between
// two calls (legacy and OpenID Connect) is replaced transparently, once;
// the retry shows in metrics and the audit log.
func TestProxyExpiredBetweenCalls(t *testing.T) {
	h := start(t, options{legacy: true, oidc: true, apiURL: "emu"})
	for _, id := range []string{aliceLegacy, aliceOIDC} {
		if resp, _ := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", id, nil, ""); resp.StatusCode != 200 {
			t.Fatal(id, resp.Status)
		}
	}
	before, err := h.store.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	// Past both tokens' lifetime at the service (24h); the agent still holds them.
	h.advance(25 * time.Hour)
	for _, id := range []string{aliceLegacy, aliceOIDC} {
		if resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", id, nil, ""); resp.StatusCode != 200 {
			t.Fatal(id, resp.Status, body)
		}
	}
	// One refusal per scheme, one new legacy token, one refreshed access token.
	if st := h.emu.Stats(); st.LegacyTokens != 2 || st.Rejections[emulator.CodeInvalidAuthToken] != 2 {
		t.Fatalf("tokens %d, rejections %v", st.LegacyTokens, st.Rejections)
	}
	if rec, err := h.store.Load("default"); err != nil || rec.AccessToken == before.AccessToken {
		t.Fatalf("the refreshed token was not saved: %v", err)
	}
	if v := h.metric(t, `signagent_service_retries_total{method="GetMyOrganizations"}`); v != "2" {
		t.Fatalf("retries = %s", v)
	}
	if n := strings.Count(h.audit.String(), `"retried":true`); n != 2 {
		t.Fatalf("%d audit lines say retried", n)
	}
}

// TestProxyRefusals: the 401 causes the agent can meet. The service
// refusing a fresh header too is passed on as it came (fault injection:
// the emulator takes every token the agent obtains); a developer key the
// service does not know fails at Authenticate, before any call (422).
func TestProxyRefusals(t *testing.T) {
	h := start(t, options{legacy: true, oidc: true, apiURL: "emu"})
	h.emu.InjectFaults("GetMyOrganizations", emuStatus(401), emuStatus(401))
	resp, _ := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", aliceOIDC, nil, "")
	if resp.StatusCode != 401 || h.metric(t, `signagent_service_retries_total{method="GetMyOrganizations"}`) != "1" {
		t.Fatalf("refused twice: %d", resp.StatusCode)
	}
	if resp.Header.Get("WWW-Authenticate") != "" {
		t.Fatal("a service 401 must not look like the agent's own")
	}
	// Not signed in (OpenID Connect): 409 naming signagent oidc login.
	resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "oidc profile=nobody", nil, "")
	if resp.StatusCode != 409 || !strings.Contains(body, "signagent oidc login --profile nobody") {
		t.Fatalf("not signed in: %d %s", resp.StatusCode, body)
	}
}

// TestProxyUnknownDeveloperKey: an unknown ddauth_api_client_id (the
// agent's developer key is not the service's) fails at Authenticate,
// before the call: 422 without the key.
func TestProxyUnknownDeveloperKey(t *testing.T) {
	h2 := start(t, options{apiURL: "emu"})
	h2.reload(t, func(c *agent.Config) {
		c.Schemes.Legacy = &schemes.LegacySettings{Client: &legacy.Config{APIURL: h2.emu.URL(), DeveloperKey: "unknownClient-0a1b2c3d4e"},
			Passwords: map[string]string{"alice@example.com": alicePassword}}
	})
	resp, body := h2.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", aliceLegacy, nil, "")
	if resp.StatusCode != 422 || !strings.Contains(body, "service_refused") || strings.Contains(body, devKey) {
		t.Fatalf("unknown developer key: %d %s", resp.StatusCode, body)
	}
}

// TestProxyBadInput: selectors, paths, bodies and methods the proxy
// refuses, each before anything reaches the service.
func TestProxyBadInput(t *testing.T) {
	h := start(t, options{legacy: true, oidc: true, apiURL: "emu", maxBody: 1024})
	before := h.emu.Stats().Requests["GetMyOrganizations"]
	for _, c := range []struct {
		name, method, path, identity, body, code string
		status                                   int
	}{
		{"no selector", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "", "", "bad_input", 400},
		{"unknown scheme", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "kerberos user=x", "", "bad_input", 400},
		{"two credentials", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "trusted snils=11223344595 phone=9161234567 serviceUserId=crm-42", "", "bad_input", 400},
		{"bad snils", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "trusted snils=11223344500 serviceUserId=crm-42", "", "bad_input", 400},
		{"no serviceUserId", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "trusted snils=11223344595", "", "bad_input", 400},
		{"unknown key", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "oidc profile=default password=hunter2", "", "bad_input", 400},
		{"key twice", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "oidc profile=a profile=b", "", "bad_input", 400},
		{"bad profile", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "oidc profile=../../etc", "", "bad_input", 400},
		{"legacy without login", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "legacy", "", "bad_input", 400},
		{"no password for login", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "legacy login=mallory@example.com", "", "bad_input", 400},
		{"8-bit bytes", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "legacy login=\xff\xfe@example.com", "", "bad_input", 400},
		{"bidi override", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "legacy login=alice\u202e@example.com", "", "bad_input", 400},
		{"line separator", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "oidc profile=a\u2028b", "", "bad_input", 400},
		{"long identity", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "legacy login=" + strings.Repeat("a", 2000), "", "bad_input", 400},
		{"dot-dot", "GET", "/v1/service/../v1/signatures", aliceOIDC, "", "bad_input", 400},
		{"dot-dot inside", "GET", "/v1/service/a/../GetMyOrganizations?autoRegister=false", aliceOIDC, "", "bad_input", 400},
		{"escaped dot-dot", "GET", "/v1/service/%2e%2e/x", aliceOIDC, "", "bad_input", 400},
		{"escaped slash", "GET", "/v1/service/a%2F..%2Fb", aliceOIDC, "", "bad_input", 400},
		{"//host", "GET", "/v1/service//evil.example/x", aliceOIDC, "", "bad_input", 400},
		{"absolute URL", "GET", "/v1/service/http://evil.example/x", aliceOIDC, "", "bad_input", 400},
		{"no method", "GET", "/v1/service/", aliceOIDC, "", "bad_input", 400},
		{"body over the limit", "POST", "/v1/service/GetMyOrganizations?autoRegister=false", aliceOIDC, strings.Repeat("x", 1025), "body_too_large", 413},
		{"PUT", "PUT", "/v1/service/GetMyOrganizations?autoRegister=false", aliceOIDC, "", "method_not_allowed", 405},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := h.call(t, c.method, c.path, c.identity, nil, c.body)
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil || resp.StatusCode != c.status || e.Error.Code != c.code {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if strings.Contains(e.Error.Message, "\n") || strings.Contains(body, "hunter2") || strings.Contains(body, "11223344") {
				t.Fatalf("message: %s", body)
			}
		})
	}
	if after := h.emu.Stats().Requests["GetMyOrganizations"]; after != before {
		t.Fatalf("%d refused requests reached the service", after-before)
	}
	// A body within the limit is sent, once per attempt.
	if resp, _ := h.call(t, "POST", "/v1/service/GetMyOrganizations?autoRegister=false", aliceOIDC, http.Header{"Content-Type": {"application/json"}}, "{}"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	// Only the proxy's routes are open to rules naming "service".
	if _, err := access.ParseRouteRule("unix=service"); err != nil {
		t.Fatal(err)
	}
}

// TestProxyHeaders: what reaches the service and what comes back. The
// emulator runs behind a recorder here (the same emulator, its handler
// wrapped) because it cannot report the headers it was sent.
func TestProxyHeaders(t *testing.T) {
	h := start(t, options{oidc: true})
	var mu sync.Mutex
	var got http.Header
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("X-Answer", "kept")
		w.Header().Set("Connection", "X-Hop-Back")
		w.Header().Set("X-Hop-Back", "dropped")
		w.Header().Set(proxy.ErrorHeader, "forged_by_the_service")
		h.emu.Handler().ServeHTTP(w, r)
	}))
	defer rec.Close()
	h.reload(t, func(c *agent.Config) { c.APIURL = rec.URL })
	hdr := http.Header{"Authorization": {"DiadocAuth ddauth_token=the-callers-own"}, "Cookie": {"session=callers"},
		"Connection": {"X-Hop"}, "X-Hop": {"1"}, "Proxy-Authorization": {"Basic eDp5"}, "X-Request-Id": {"r-1"}}
	resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", aliceOIDC, hdr, "")
	if resp.StatusCode != 200 || !strings.Contains(body, "Horns and Hooves") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if a := got.Get("Authorization"); !strings.HasPrefix(a, "Bearer ") {
		t.Errorf("Authorization sent: %q", a)
	}
	for _, k := range []string{"Cookie", "X-Hop", "Proxy-Authorization", proxy.IdentityHeader} {
		if v := got.Get(k); v != "" {
			t.Errorf("%s forwarded: %q", k, v)
		}
	}
	if got.Get("X-Request-Id") != "r-1" {
		t.Error("an end-to-end header was dropped")
	}
	if resp.Header.Get("X-Answer") != "kept" || resp.Header.Get("X-Hop-Back") != "" {
		t.Errorf("answer headers: %v", resp.Header)
	}
	// Signagent-Error is the agent's alone: the service's own is dropped,
	// so that a caller can tell the agent's refusals from the service's.
	if v := resp.Header.Values(proxy.ErrorHeader); len(v) != 0 {
		t.Errorf("the service's %s reached the caller: %q", proxy.ErrorHeader, v)
	}
	// The request's id comes back once, and names its audit line.
	if ids := resp.Header.Values("X-Request-Id"); len(ids) != 1 || ids[0] != "r-1" {
		t.Errorf("X-Request-Id in the answer: %q", ids)
	}
	if !strings.Contains(h.audit.String(), `"requestId":"r-1"`) {
		t.Errorf("the audit line lacks the request's id: %s", h.audit.String())
	}
}

// TestProxyPassesOn: what the proxy does as a reverse proxy, now that it
// forwards by itself: forwarding headers a caller could forge are dropped,
// a query the service could read otherwise than the agent (a semicolon)
// is re-encoded, a caller without a User-Agent sends none (not Go's), a
// caller's "TE: trailers" reaches the service, and the service's
// trailers reach the caller. A stand-in service records what it got (the
// emulator cannot report it) and answers with a trailer.
func TestProxyPassesOn(t *testing.T) {
	h := start(t, options{oidc: true})
	var mu sync.Mutex
	var got *http.Request
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Clone(context.Background())
		mu.Unlock()
		w.Header().Set("Trailer", "X-Checksum")
		w.Write([]byte("body"))
		w.Header().Set("X-Checksum", "c-1")
	}))
	defer svc.Close()
	h.reload(t, func(c *agent.Config) { c.APIURL = svc.URL })
	hdr := http.Header{"X-Forwarded-For": {"10.9.9.9"}, "Forwarded": {"for=10.9.9.9"}, "X-Forwarded-Host": {"evil"},
		"User-Agent": {""}, "Te": {"trailers"}}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.sock)
	}}}
	req, _ := http.NewRequest("GET", "http://agent/v1/service/GetDocuments?a=1;b=2&c=3&d=%zz", nil)
	req.Header = hdr
	req.Header.Set(proxy.IdentityHeader, aliceOIDC)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "body" {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	if v := resp.Trailer.Get("X-Checksum"); v != "c-1" {
		t.Errorf("the service's trailer: %q (%v)", v, resp.Trailer)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"X-Forwarded-For", "Forwarded", "X-Forwarded-Host", "User-Agent"} {
		if v := got.Header.Get(k); v != "" {
			t.Errorf("%s reached the service: %q", k, v)
		}
	}
	if v := got.Header.Get("Te"); v != "trailers" {
		t.Errorf("TE: %q", v)
	}
	if strings.Contains(got.URL.RawQuery, ";") || got.URL.RawQuery != "c=3" {
		t.Errorf("the query reached the service as %q", got.URL.RawQuery)
	}
}

// TestRequestIDs: a caller's usable X-Request-Id is kept; a missing or
// unusable one (too long, with characters a log would have to escape) is
// replaced by one the agent makes; the answer, the audit line and the
// diagnostic line of a failure carry it.
func TestRequestIDs(t *testing.T) {
	h := start(t, options{})
	for _, tc := range []struct{ sent, want string }{
		{"trace-7.a:b_c", "^trace-7\\.a:b_c$"},
		{"", "^[0-9a-f]{24}$"},
		{strings.Repeat("x", 65), "^[0-9a-f]{24}$"},
		{"bad id/with*stars", "^[0-9a-f]{24}$"},
	} {
		var hdr []string
		if tc.sent != "" {
			hdr = []string{"X-Request-Id", tc.sent}
		}
		code, got, _ := raw(t, h.sock, "POST", "/v1/signatures", `{"phone":"123"}`, hdr...)
		id := got.Get("X-Request-Id")
		if code != 400 || !regexp.MustCompile(tc.want).MatchString(id) {
			t.Fatalf("sent %q: %d, id %q", tc.sent, code, id)
		}
		if !strings.Contains(h.audit.String(), `"requestId":"`+id+`"`) || !strings.Contains(h.logs.String(), id) {
			t.Fatalf("sent %q: the audit or log line lacks the id %q", tc.sent, id)
		}
	}
}

// TestProxyServiceTrouble: the service down, slow (past the request
// deadline) or answering an HTML page.
func TestProxyServiceTrouble(t *testing.T) {
	h := start(t, options{oidc: true, deadline: 2 * time.Second})
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	h.reload(t, func(c *agent.Config) { c.APIURL = down.URL })
	resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", aliceOIDC, nil, "")
	if resp.StatusCode != 502 || !strings.Contains(body, "service_unreachable") || strings.Contains(body, down.URL) {
		t.Fatalf("down: %d %s", resp.StatusCode, body)
	}

	h.reload(t, func(c *agent.Config) { c.APIURL = h.emu.URL() })
	h.emu.InjectFaults("GetMyOrganizations", emuDelay(time.Minute))
	t0 := time.Now()
	resp, body = h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", aliceOIDC, nil, "")
	if resp.StatusCode != 504 || !strings.Contains(body, "service_timeout") || time.Since(t0) > 10*time.Second {
		t.Fatalf("slow: %d %s after %v", resp.StatusCode, body, time.Since(t0))
	}

	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(503)
		w.Write([]byte("<!doctype html><p>maintenance</p>"))
	}))
	defer html.Close()
	h.reload(t, func(c *agent.Config) { c.APIURL = html.URL })
	resp, body = h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", aliceOIDC, nil, "")
	if resp.StatusCode != 503 || resp.Header.Get("Content-Type") != "text/html" || !strings.Contains(body, "maintenance") {
		t.Fatalf("HTML: %d %s", resp.StatusCode, body)
	}
	if v := h.metric(t, `signagent_service_calls_total{method="GetMyOrganizations",status="504"}`); v != "1" {
		t.Fatalf("504s = %s", v)
	}

	// No business API configured: 503.
	h.reload(t, func(c *agent.Config) { c.APIURL = "" })
	if resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", aliceOIDC, nil, ""); resp.StatusCode != 503 || !strings.Contains(body, "--business-url") {
		t.Fatalf("not configured: %d %s", resp.StatusCode, body)
	}
}

// TestProxyMethodLabels: callers cannot grow /metrics by inventing
// method names.
func TestProxyMethodLabels(t *testing.T) {
	h := start(t, options{oidc: true, apiURL: "emu"})
	for i := range 100 {
		h.call(t, "GET", "/v1/service/Made"+strings.Repeat("Up", i%40)+string(rune('A'+i%26))+"x", aliceOIDC, nil, "")
	}
	_, body := h.call(t, "GET", "/metrics", "", nil, "")
	if n := strings.Count(body, "signagent_service_calls_total{"); n > 65 {
		t.Fatalf("%d method series", n)
	}
	if !strings.Contains(body, `signagent_service_calls_total{method="other",status="404"}`) {
		t.Fatal("no other label")
	}
}

// TestProxyRouteRule: a caller class whose rules do not name "service"
// gets 403 from the proxy; one that does is served.
func TestProxyRouteRule(t *testing.T) {
	h := start(t, options{oidc: true, apiURL: "emu", routes: []access.RouteRule{{Class: "unix", Routes: []string{"sessions"}}}})
	resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", aliceOIDC, nil, "")
	if resp.StatusCode != 403 || !strings.Contains(body, `"code":"forbidden"`) {
		t.Fatalf("closed: %d %s", resp.StatusCode, body)
	}
	h.reload(t, func(c *agent.Config) { c.Routes = []access.RouteRule{{Class: "unix", Routes: []string{"service"}}} })
	if resp, body := h.call(t, "POST", "/v1/service/GetMyOrganizations?autoRegister=false", aliceOIDC, nil, ""); resp.StatusCode != 200 {
		t.Fatalf("open: %d %s", resp.StatusCode, body)
	}
}

// TestProxyStreams: an answer the service sends in parts reaches the
// caller part by part, not when the service has finished (a stand-in
// service: the emulator's answers are small and whole).
func TestProxyStreams(t *testing.T) {
	h := start(t, options{oidc: true})
	release := make(chan struct{})
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first part\n"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		w.Write([]byte("second part\n"))
	}))
	defer svc.Close()
	defer close(release)
	h.reload(t, func(c *agent.Config) { c.APIURL = svc.URL })
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.sock)
	}}}
	req, _ := http.NewRequest("GET", "http://agent/v1/service/Stream", nil)
	req.Header.Set(proxy.IdentityHeader, aliceOIDC)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 64)
		n, _ := resp.Body.Read(b)
		got <- string(b[:n])
	}()
	select {
	case s := <-got:
		if s != "first part\n" {
			t.Fatalf("first read %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first part did not arrive before the service finished")
	}
}

// TestProxyCutOffAudited: an answer the request deadline cuts off while it
// streams is audited as cut off, not "ok" (it was, with a log line of no
// level), and the reverse proxy's own line is a warning. A stand-in
// service: the emulator's answers are small and whole.
func TestProxyCutOffAudited(t *testing.T) {
	h := start(t, options{oidc: true, deadline: time.Second})
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.Write([]byte(`{"Organizations":[`))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer svc.Close()
	h.reload(t, func(c *agent.Config) { c.APIURL = svc.URL })
	// The caller sees the connection broken (at the headers or within the
	// body, whatever was flushed when the deadline came).
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.sock)
	}}}
	req, _ := http.NewRequest("GET", "http://agent/v1/service/Slow", nil)
	req.Header.Set(proxy.IdentityHeader, aliceOIDC)
	if resp, err := c.Do(req); err == nil {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && len(b) == 100 {
			t.Fatalf("the whole answer arrived: %q", b)
		}
	}
	waitUntil(t, func() bool { return strings.Contains(h.audit.String(), `"call":"GET /Slow"`) })
	audit := h.audit.String()
	if !strings.Contains(audit, `"outcome":"answer_cut_off"`) || !strings.Contains(audit, `"serviceStatus":200`) {
		t.Fatalf("audit: %s", audit)
	}
	if logs := h.logs.String(); !strings.Contains(logs, `"level":"warn"`) || !strings.Contains(logs, "body copy") {
		t.Fatalf("the cut-off line should be a warning: %s", logs)
	}
}

// waitUntil polls cond for up to five seconds.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
	}
}

// TestProxyBodyBudget: a body that does not fit the budget of held bodies
// is answered 503 busy at once, without waiting and without reaching the
// service; a large body is spooled and reaches the service whole, on the
// retry after a 401 too. A stand-in service in front of the emulator
// records the bodies it was sent (the emulator cannot report them).
func TestProxyBodyBudget(t *testing.T) {
	h := start(t, options{oidc: true, budget: 1 << 20, maxBody: 1 << 20})
	big := bytes.Repeat([]byte("0123456789abcdef"), 700<<10/16)
	var mu sync.Mutex
	var bodies [][]byte
	release := make(chan struct{})
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		if r.URL.Path == "/Hold" {
			<-release
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.URL.Path = "/GetMyOrganizations"
		h.emu.Handler().ServeHTTP(w, r)
	}))
	defer rec.Close()
	h.reload(t, func(c *agent.Config) { c.APIURL = rec.URL })
	// Spooled, and sent twice: the first value is refused once.
	h.emu.InjectFaults("GetMyOrganizations", emuStatus(401))
	resp, body := h.call(t, "POST", "/v1/service/Spooled", aliceOIDC, http.Header{"Content-Type": {"application/json"}}, string(big))
	if resp.StatusCode != 200 {
		t.Fatalf("spooled body: %d %s", resp.StatusCode, body)
	}
	mu.Lock()
	if len(bodies) != 2 || !bytes.Equal(bodies[0], big) || !bytes.Equal(bodies[1], big) {
		t.Fatalf("the service got %d bodies, not twice the %d bytes", len(bodies), len(big))
	}
	mu.Unlock()
	// One 700 KiB body held by a call the service answers slowly: a second
	// one does not fit the 1 MiB budget and is refused at once.
	done := make(chan int)
	go func() {
		resp, _ := h.call(t, "POST", "/v1/service/Hold", aliceOIDC, nil, string(big))
		done <- resp.StatusCode
	}()
	waitUntil(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(bodies) == 3 })
	t0 := time.Now()
	resp, body = h.call(t, "POST", "/v1/service/Second", aliceOIDC, nil, string(big))
	if resp.StatusCode != 503 || !strings.Contains(body, `"code":"busy"`) || resp.Header.Get("Retry-After") == "" || time.Since(t0) > 2*time.Second {
		t.Fatalf("over the budget: %d %s after %v", resp.StatusCode, body, time.Since(t0))
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("held call: %d", code)
	}
	mu.Lock()
	n := len(bodies)
	mu.Unlock()
	if n != 3 {
		t.Fatalf("the refused call reached the service")
	}
	// Once the held body is released, a large body fits again.
	if resp, body := h.call(t, "POST", "/v1/service/Again", aliceOIDC, nil, string(big)); resp.StatusCode != 200 {
		t.Fatalf("after release: %d %s", resp.StatusCode, body)
	}
}

// TestProxyDoesNotFollowRedirects: a business API that redirects to
// another host gets its 3xx passed on to the caller; the agent never
// follows it, so the identity's Authorization header never reaches the
// other host. Stand-in servers: the emulator does not redirect.
func TestProxyDoesNotFollowRedirects(t *testing.T) {
	h := start(t, options{oidc: true})
	var reached atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer other.Close()
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/steal", http.StatusTemporaryRedirect)
	}))
	defer svc.Close()
	h.reload(t, func(c *agent.Config) { c.APIURL = svc.URL })
	resp, _ := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", aliceOIDC, nil, "")
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != other.URL+"/steal" || reached.Load() != 0 {
		t.Fatalf("%d %q, the other host reached %d times", resp.StatusCode, resp.Header.Get("Location"), reached.Load())
	}
}

// TestProxyNoProtocolSwitch: the proxy passes no protocol switch on (the
// caller's Upgrade header is hop-by-hop and dropped); a service that
// answers 101 anyway is a failed call, 502 with the agent's error code,
// not a connection handed over. A stand-in service: the emulator never
// switches.
func TestProxyNoProtocolSwitch(t *testing.T) {
	h := start(t, options{oidc: true})
	var upgrade atomic.Value
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upgrade.Store(r.Header.Get("Upgrade"))
		w.Header().Set("Upgrade", "websocket")
		w.Header().Set("Connection", "Upgrade")
		w.WriteHeader(http.StatusSwitchingProtocols)
	}))
	defer svc.Close()
	h.reload(t, func(c *agent.Config) { c.APIURL = svc.URL })
	hdr := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}
	resp, body := h.call(t, "GET", "/v1/service/Stream", aliceOIDC, hdr, "")
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(proxy.ErrorHeader) != "service_unreachable" {
		t.Fatalf("%d %s %q", resp.StatusCode, resp.Header.Get(proxy.ErrorHeader), body)
	}
	if u, _ := upgrade.Load().(string); u != "" {
		t.Errorf("the caller's Upgrade reached the service: %q", u)
	}
}

// TestProxyNoCrossTalk: a business API that writes a second answer on a
// kept connection after answering one caller (issue 36) costs that
// connection, never the next caller: each caller gets the answer written
// for it. A raw-TCP stand-in service: no net/http server misbehaves so.
func TestProxyNoCrossTalk(t *testing.T) {
	h := start(t, options{oidc: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	answer := func(who string) string {
		return "HTTP/1.1 200 OK\r\nX-For: " + who + "\r\nContent-Length: " + strconv.Itoa(4+len(who)) + "\r\n\r\nfor " + who
	}
	// intruded says the stray answer is written: the next call waits for
	// it, so that on a loaded machine it lands before that call, as the
	// test means (bytes that come after a request went out cannot be told
	// from its answer by any HTTP/1.1 client).
	intruded := make(chan struct{}, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					who := req.Header.Get("X-Who")
					io.WriteString(c, answer(who))
					time.Sleep(20 * time.Millisecond)
					io.WriteString(c, answer("intruder")) // nobody asked
					intruded <- struct{}{}
				}
			}()
		}
	}()
	h.reload(t, func(c *agent.Config) { c.APIURL, c.AllowInsecureAPI = "http://"+ln.Addr().String(), true })
	for _, who := range []string{"first", "second", "third"} {
		resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations", aliceOIDC, http.Header{"X-Who": {who}}, "")
		if resp.StatusCode != 200 || body != "for "+who || resp.Header.Get("X-For") != who {
			t.Fatalf("caller %q got %d %q (written for %q)", who, resp.StatusCode, body, resp.Header.Get("X-For"))
		}
		select {
		case <-intruded:
		case <-time.After(10 * time.Second):
			t.Fatal("the stray answer was not written within 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
