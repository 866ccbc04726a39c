package agent_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agent/proxy"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/internal/httpx/httpxtest"
)

// TestProxyHeadBounds: a business API's answer head is read up to
// --service-max-header-fields fields (100) and --service-max-header-bytes
// bytes (64 KiB), each a reloadable setting; past either the caller gets
// 502 with the agent's JSON error naming the bound and the setting
// (before: a head of up to 1 MiB, in any number of fields, was taken).
func TestProxyHeadBounds(t *testing.T) {
	h := start(t, options{oidc: true})
	answers := map[string]string{
		"/Fields100":    httpxtest.Fields(100),
		"/Fields110":    httpxtest.Fields(110),
		"/Fields150":    httpxtest.Fields(150),
		"/Tiny100000":   httpxtest.TinyFields(100000),
		"/Head65KiB":    httpxtest.BigHead(65 << 10),
		"/HeadFourKiB":  httpxtest.BigHead(4 << 10),
		"/Interim150":   "HTTP/1.1 103 Early Hints\r\n" + strings.Repeat("Link: </a>\r\n", 150) + "\r\n" + httpxtest.Fields(2),
		"/WithinBounds": httpxtest.Fields(2),
		"/Lone101":      "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
	}
	url := httpxtest.Serve(t, func(path string) string { return answers[path] })
	h.reload(t, func(c *agent.Config) { c.APIURL = url })
	call := func(method string) (int, string, agentapi.Error) {
		t.Helper()
		resp, body := h.call(t, "GET", "/v1/service/"+method, aliceOIDC, nil, "")
		var eb agentapi.ErrorBody
		if resp.StatusCode != 200 {
			if err := json.Unmarshal([]byte(body), &eb); err != nil || resp.Header.Get(proxy.ErrorHeader) != eb.Error.Code {
				t.Fatalf("%s: %d %q, not the agent's JSON error", method, resp.StatusCode, body)
			}
		}
		return resp.StatusCode, body, eb.Error
	}
	for _, tc := range []struct {
		method string
		status int
		msg    string
	}{
		{"WithinBounds", 200, ""},
		{"Fields100", 200, ""},
		{"HeadFourKiB", 200, ""},
		{"Fields150", 502, "the business call: the service answered a head of more than 100 header fields, past --service-max-header-fields"},
		{"Tiny100000", 502, "the business call: the service answered a head of more than 100 header fields, past --service-max-header-fields"},
		{"Interim150", 502, "the business call: the service answered a head of more than 100 header fields, past --service-max-header-fields"},
		{"Head65KiB", 502, "the business call: the service answered a head larger than 64 KiB, past --service-max-header-bytes"},
		{"Lone101", 502, "the business call: could not reach the service: the service answered 101, which the proxy does not pass on"},
	} {
		status, body, e := call(tc.method)
		if status != tc.status || (status == 502 && (e.Code != agentapi.CodeServiceUnreachable || e.Message != tc.msg)) || (status == 200 && body != "ok") {
			t.Errorf("%s: %d %+v %.80q, want %d %q", tc.method, status, e, body, tc.status, tc.msg)
		}
		// An answer refused is an answer: the service is not down.
		if v := h.metric(t, `signagent_dependency_up{dependency="service"}`); v != "1" {
			t.Errorf("after %s: signagent_dependency_up{service} = %s, want 1", tc.method, v)
		}
	}

	// The settings, reloaded: more fields, fewer bytes.
	h.reload(t, func(c *agent.Config) { c.ServiceMaxHeaderFields, c.ServiceMaxHeaderBytes = 120, 2<<10 })
	if status, body, e := call("Fields110"); status != 200 || body != "ok" {
		t.Errorf("110 fields, with 120 allowed: %d %+v", status, e)
	}
	if status, _, e := call("HeadFourKiB"); status != 502 || e.Message != "the business call: the service answered a head larger than 2 KiB, past --service-max-header-bytes" {
		t.Errorf("a head of 4 KiB, with 2 KiB allowed: %d %+v", status, e)
	}
	err := h.d.Reload(func() agent.Config { c := h.cfg; c.ServiceMaxHeaderFields = -1; return c }())
	if err == nil || !strings.Contains(err.Error(), "service-max-header-fields") {
		t.Errorf("a negative bound: %v", err)
	}
	// Past what a signagent client reads of the answer the agent passes
	// on (agentclient.MaxHeaderFields, MaxHeaderBytes) with the agent's
	// own fields: refused, the cap named.
	for _, tc := range []struct {
		change func(c *agent.Config)
		want   string
	}{
		{func(c *agent.Config) { c.ServiceMaxHeaderFields = agent.MaxServiceHeaderFields + 1 }, "service-max-header-fields 121 is more than 120, the most a signagent client reads"},
		{func(c *agent.Config) { c.ServiceMaxHeaderBytes = agent.MaxServiceHeaderBytes + 1 }, "service-max-header-bytes 1044481 is more than 1044480, the most a signagent client reads"},
	} {
		c := h.cfg
		tc.change(&c)
		if err := h.d.Reload(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("past the cap: %v, want %q", err, tc.want)
		}
	}
	h.reload(t, func(c *agent.Config) {
		c.ServiceMaxHeaderFields, c.ServiceMaxHeaderBytes = agent.MaxServiceHeaderFields, agent.MaxServiceHeaderBytes
	})
	if status, body, e := call("Fields110"); status != 200 || body != "ok" {
		t.Errorf("at the caps: %d %+v", status, e)
	}
}
