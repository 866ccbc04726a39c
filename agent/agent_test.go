package agent_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agent/access"
	"github.com/signagent/signagent/agent/listen"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer"
)

var phone = agentapi.Credential{Phone: "+7 916 123-45-67"}

// raw sends a request over the socket and returns status, headers and body.
// raw sends a request to the agent on sock, a Unix socket's path or
// tcp:HOST:PORT, and returns its answer.
func raw(t *testing.T, sock, method, path, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	network, addr := "unix", sock
	if a, ok := strings.CutPrefix(sock, "tcp:"); ok {
		network, addr = "tcp", a
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}}
	req, _ := http.NewRequest(method, "http://agent"+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestEndpoints(t *testing.T) {
	h := start(t, options{expose: true})
	ctx := context.Background()

	t.Run("signatures", func(t *testing.T) {
		s, err := h.client.Sign(ctx, agentapi.SignatureRequest{Credential: phone})
		if err != nil {
			t.Fatal(err)
		}
		der, _ := base64.StdEncoding.DecodeString(s.Signature)
		ts, err := canonical.ParseTimestamp(s.Timestamp)
		if err != nil {
			t.Fatal(err)
		}
		want := canonical.Text(apiKey, canonical.Credential{Kind: canonical.Phone, Value: "9161234567"}, ts)
		if s.Canonical != string(want) {
			t.Fatalf("canonical %q, want %q", s.Canonical, want)
		}
		v, err := signer.Verify(der, want, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !v.Signer.Equal(h.tk.RSA.Cert) || s.CertificateThumbprint == "" {
			t.Fatal("signed by the wrong certificate")
		}
		// With a given timestamp.
		s, err = h.client.Sign(ctx, agentapi.SignatureRequest{Credential: agentapi.Credential{SNILS: "112-233-445 95"}, Timestamp: "16.08.2026 14:03:10"})
		if err != nil || s.Timestamp != "16.08.2026 14:03:10" || !strings.Contains(s.Canonical, "id=11223344595\r\n") {
			t.Fatalf("%+v %v", s, err)
		}
	})

	t.Run("sessions", func(t *testing.T) {
		req := agentapi.SessionRequest{Credential: phone, ServiceUserID: "crm-42"}
		first, err := h.client.Session(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if first.Cached {
			t.Fatal("first session cached")
		}
		if _, ok := h.emu.LookupSid(first.Sid); !ok {
			t.Fatal("the service does not know the sid")
		}
		again, err := h.client.Session(ctx, req)
		if err != nil || !again.Cached || again.Sid != first.Sid || !again.ObtainedAt.Equal(first.ObtainedAt.Time) {
			t.Fatalf("second: %+v %v", again, err)
		}
		req.Refresh = true
		fresh, err := h.client.Session(ctx, req)
		if err != nil || fresh.Cached || fresh.Sid == first.Sid {
			t.Fatalf("refresh: %+v %v", fresh, err)
		}
		dropped, err := h.client.DropSession(ctx, phone, "crm-42")
		if err != nil || !dropped {
			t.Fatalf("drop: %v %v", dropped, err)
		}
		dropped, err = h.client.DropSession(ctx, phone, "crm-42")
		if err != nil || dropped {
			t.Fatalf("drop again: %v %v", dropped, err)
		}
		after, err := h.client.Session(ctx, agentapi.SessionRequest{Credential: phone, ServiceUserID: "crm-42"})
		if err != nil || after.Cached {
			t.Fatalf("after drop: %+v %v", after, err)
		}
	})

	t.Run("links", func(t *testing.T) {
		if err := h.client.Link(ctx, "crm-7", "8 916 123 45 67"); err != nil {
			t.Fatal(err)
		}
		if s, err := h.client.Session(ctx, agentapi.SessionRequest{Credential: agentapi.Credential{SNILS: "11223344595"}, ServiceUserID: "crm-7"}); err != nil || s.Sid == "" {
			t.Fatalf("session after link: %v", err)
		}
	})

	t.Run("health", func(t *testing.T) {
		if code, _, body := raw(t, h.sock, "GET", "/healthz", ""); code != 200 || !strings.Contains(body, `"status":"ok"`) {
			t.Fatalf("%d %s", code, body)
		}
		r, err := h.client.Ready(ctx)
		if err != nil || r.Status != "ready" || !r.Token.Ready || r.Token.Key != "rsa" {
			t.Fatalf("%+v %v", r, err)
		}
		code, hdr, body := raw(t, h.sock, "GET", "/metrics", "")
		if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
			t.Fatalf("metrics %d %s", code, hdr)
		}
		for _, m := range []string{
			`signagent_requests_total{method="POST",route="/v1/signatures",status="200"}`,
			"signagent_sign_duration_seconds_count", "signagent_token_ready 1", "signagent_session_cache_hits_total 1",
			"signagent_queue_depth 0", "signagent_queue_rejected_total 0", "process_resident_memory_bytes",
			// Label sets known in advance are there from the first scrape.
			`signagent_sign_errors_total{reason="pin_locked"} 0`, `signagent_sign_errors_total{reason="device"} 0`,
			`signagent_authorizations_total{result="failed",scheme="oidc"} 0`, `signagent_oidc_refreshes_total{result="refused"} 0`,
		} {
			if !strings.Contains(body, m) {
				t.Errorf("metrics lack %s", m)
			}
		}
		if !regexp.MustCompile(`(?m)^signagent_build_info\{goversion="go[^"]+",revision="[^"]*",version="dev"\} 1$`).MatchString(body) {
			t.Errorf("metrics lack signagent_build_info with the Go version, revision and version")
		}
	})
}

func TestErrorStatuses(t *testing.T) {
	h := start(t, options{})
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"bad JSON", "POST", "/v1/signatures", `{"phone":`, 400, agentapi.CodeBadInput},
		{"unknown field", "POST", "/v1/signatures", `{"phone":"9161234567","pin":"1234"}`, 400, agentapi.CodeBadInput},
		{"two credentials", "POST", "/v1/signatures", `{"phone":"9161234567","snils":"11223344595"}`, 400, agentapi.CodeBadInput},
		{"no credential", "POST", "/v1/signatures", `{}`, 400, agentapi.CodeBadInput},
		{"bad timestamp", "POST", "/v1/signatures", `{"phone":"9161234567","timestamp":"1.2.2024 3:04:05"}`, 400, agentapi.CodeBadInput},
		{"bad SNILS", "POST", "/v1/sessions", `{"snils":"11223344594","serviceUserId":"x"}`, 400, agentapi.CodeBadInput},
		{"no serviceUserId", "POST", "/v1/sessions", `{"phone":"9161234567"}`, 400, agentapi.CodeBadInput},
		{"drop without credential", "DELETE", "/v1/sessions?serviceUserId=x", ``, 400, agentapi.CodeBadInput},
		{"serviceUserId with a newline", "POST", "/v1/sessions", `{"phone":"9161234567","serviceUserId":"crm-42\n{\"outcome\":\"ok\"}"}`, 400, agentapi.CodeBadInput},
		{"serviceUserId with an escape", "POST", "/v1/links", `{"phone":"9161234567","serviceUserId":"crm\u001b[2J"}`, 400, agentapi.CodeBadInput},
		{"serviceUserId too long", "POST", "/v1/sessions", `{"phone":"9161234567","serviceUserId":"` + strings.Repeat("x", 257) + `"}`, 400, agentapi.CodeBadInput},
		{"drop with a control character", "DELETE", "/v1/sessions?phone=9161234567&serviceUserId=crm%0D%0A42", ``, 400, agentapi.CodeBadInput},
		{"too large", "POST", "/v1/signatures", `{"phone":"` + strings.Repeat("9", 70<<10) + `"}`, 413, agentapi.CodeTooLarge},
		{"unknown path", "GET", "/v2/nothing", ``, 404, agentapi.CodeNotFound},
		{"wrong method", "GET", "/v1/signatures", ``, 405, agentapi.CodeMethodNotAllowed},
		{"service refused", "POST", "/v1/sessions", `{"phone":"9160000000","serviceUserId":"crm-42"}`, 422, agentapi.CodeServiceRefused},
		{"link refused", "POST", "/v1/links", `{"phone":"9160000000","serviceUserId":"x"}`, 422, agentapi.CodeServiceRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, hdr, body := raw(t, h.sock, tc.method, tc.path, tc.body)
			if code != tc.status || !strings.Contains(body, `"code":"`+tc.code+`"`) {
				t.Fatalf("got %d %s, want %d %s", code, body, tc.status, tc.code)
			}
			if hdr.Get("Content-Type") != "application/json" {
				t.Fatalf("content type %q", hdr.Get("Content-Type"))
			}
		})
	}
	t.Run("refused ids stay out of the audit log", func(t *testing.T) {
		if a := h.audit.String(); strings.Contains(a, "xxxxxxxx") || strings.Contains(a, "\\u001b") || strings.Contains(a, "crm\\r") {
			t.Fatalf("audit log holds a refused serviceUserId: %s", a)
		}
	})
	t.Run("service code carried", func(t *testing.T) {
		_, err := h.client.Session(context.Background(), agentapi.SessionRequest{Credential: agentapi.Credential{Phone: "9160000000"}, ServiceUserID: "crm-42"})
		e := apiErr(t, err)
		if e.Body.ServiceCode != "UserNotFound" || e.Body.Step != "authenticate-by-truster" {
			t.Fatalf("%+v", e.Body)
		}
	})
	t.Run("wrong method lists the allowed ones", func(t *testing.T) {
		if _, hdr, _ := raw(t, h.sock, "PUT", "/v1/sessions", ""); hdr.Get("Allow") != "DELETE, POST" {
			t.Fatalf("Allow %q", hdr.Get("Allow"))
		}
	})
}

func TestServiceFailures(t *testing.T) {
	h := start(t, options{timeout: 300 * time.Millisecond})
	ctx := context.Background()
	req := agentapi.SessionRequest{Credential: phone, ServiceUserID: "crm-42"}

	// Slow: the service takes longer than the client's time limit, twice.
	h.emu.InjectFaults("authenticate-by-truster", emuDelay(2*time.Second), emuDelay(2*time.Second), emuDelay(2*time.Second))
	if e := apiErr(t, err2(h.client.Session(ctx, req))); e.Status != 504 || e.Body.Code != agentapi.CodeServiceTimeout {
		t.Fatalf("slow service: %+v", e)
	}
	// Failing: 500 on every try.
	h.emu.InjectFaults("authenticate-by-truster", emuStatus(500), emuStatus(500), emuStatus(500))
	if e := apiErr(t, err2(h.client.Session(ctx, req))); e.Status != 502 || e.Body.Code != agentapi.CodeServiceError {
		t.Fatalf("failing service: %+v", e)
	}
	// Gone.
	h.emu.Close(ctx)
	if e := apiErr(t, err2(h.client.Session(ctx, req))); e.Status != 502 || e.Body.Code != agentapi.CodeServiceUnreachable {
		t.Fatalf("unreachable service: %+v", e)
	}
}

func TestNoServiceConfigured(t *testing.T) {
	h := start(t, options{noService: true})
	_, err := h.client.Session(context.Background(), agentapi.SessionRequest{Credential: phone, ServiceUserID: "x"})
	if e := apiErr(t, err); e.Status != 503 || e.Body.Code != agentapi.CodeNotConfigured {
		t.Fatalf("%+v", e)
	}
	// Signatures need only the token and the API key.
	if _, err := h.client.Sign(context.Background(), agentapi.SignatureRequest{Credential: phone}); err != nil {
		t.Fatal(err)
	}
}

func err2[T any](_ T, err error) error { return err }

func TestCallers(t *testing.T) {
	t.Run("uid not in the allow-list", func(t *testing.T) {
		h := start(t, options{allowUIDs: []int{os.Getuid() + 12345}})
		code, _, body := raw(t, h.sock, "GET", "/healthz", "")
		if code != 403 || !strings.Contains(body, `"code":"forbidden"`) || !strings.Contains(body, fmt.Sprintf("uid %d", os.Getuid())) {
			t.Fatalf("%d %s", code, body)
		}
		if !strings.Contains(h.audit.String(), `"outcome":"forbidden"`) {
			t.Fatalf("refusal not audited: %s", h.audit.String())
		}
	})
	for name, o := range map[string]options{
		"uid in the allow-list": {allowUIDs: []int{os.Getuid()}},
		"gid in the allow-list": {allowGIDs: []int{os.Getgid()}},
	} {
		t.Run(name, func(t *testing.T) {
			h := start(t, o)
			if code, _, body := raw(t, h.sock, "GET", "/healthz", ""); code != 200 {
				t.Fatalf("%d %s", code, body)
			}
		})
	}
	t.Run("bearer token", func(t *testing.T) {
		const token = "3f1c0e9b8a7d6c5b4a39281706f5e4d3"
		h := start(t, options{bearer: token})
		for _, tc := range []struct {
			hdr  []string
			want int
		}{
			{nil, 401},
			{[]string{"Authorization", "Bearer wrong-token-wrong-token"}, 401},
			{[]string{"Authorization", "Basic " + token}, 401},
			{[]string{"Authorization", "Bearer " + token}, 200},
			{[]string{"Authorization", "bearer " + token}, 200},
		} {
			code, hdr, body := raw(t, h.tcp, "GET", "/healthz", "", tc.hdr...)
			if code != tc.want {
				t.Fatalf("%v: %d %s", tc.hdr, code, body)
			}
			if code == 401 && hdr.Get("WWW-Authenticate") == "" {
				t.Fatal("no WWW-Authenticate")
			}
		}
	})
	t.Run("non-loopback without TLS refused", func(t *testing.T) {
		for _, addr := range []string{"0.0.0.0:0", "[::]:0", "192.0.2.1:8700"} {
			if _, err := listen.ListenTCP(addr, nil); err == nil || !strings.Contains(err.Error(), "without TLS") {
				t.Fatalf("%s: %v", addr, err)
			}
		}
		l, err := listen.ListenTCP("127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
	})
	t.Run("socket mode", func(t *testing.T) {
		h := start(t, options{})
		st, err := os.Stat(h.sock)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v %v", st.Mode(), err)
		}
		// A second agent on the same path is refused; the live socket stays.
		if _, err := listen.ListenUnix(listen.UnixSocket{Path: h.sock}); err == nil || !strings.Contains(err.Error(), "already serving") {
			t.Fatalf("second listener: %v", err)
		}
	})
}

// TestConcurrentSessions: 200 requests for 20 users at once; each gets a
// valid Sid and the service sees exactly one flow per user.
func TestConcurrentSessions(t *testing.T) {
	h := start(t, options{users: 20, workers: 2})
	var wg sync.WaitGroup
	sids := make([]string, 200)
	errs := make([]error, 200)
	for i := range 200 {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			u := i % 20
			s, err := h.client.Session(context.Background(), agentapi.SessionRequest{
				Credential: agentapi.Credential{Phone: fmt.Sprintf("92000000%02d", u)}, ServiceUserID: fmt.Sprintf("suid%d", u)})
			if err == nil {
				sids[i] = s.Sid
			}
			errs[i] = err
		}(i)
	}
	wg.Wait()
	perUser := map[int]string{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		u := i % 20
		rec, ok := h.emu.LookupSid(sids[i])
		if !ok || rec.UserID != fmt.Sprintf("user%d", u) {
			t.Fatalf("request %d got a sid the service does not know for user%d", i, u)
		}
		if prev, ok := perUser[u]; ok && prev != sids[i] {
			t.Fatalf("user%d got two different sids", u)
		}
		perUser[u] = sids[i]
	}
	st := h.emu.Stats()
	for u := range 20 {
		if n := st.SessionsByUser[fmt.Sprintf("suid%d", u)]; n != 1 {
			t.Errorf("suid%d: %d flows, want 1", u, n)
		}
	}
}

// TestQueueFull: a burst larger than the queue gets 429 at once for the
// excess; every request is answered exactly once.
func TestQueueFull(t *testing.T) {
	h := start(t, options{workers: 1, backlog: 2, delay: time.Second})
	const n = 20
	type answer struct {
		status  int
		elapsed time.Duration
		retry   time.Duration
	}
	answers := make(chan answer, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, err := h.client.Sign(context.Background(), agentapi.SignatureRequest{Credential: phone})
			a := answer{status: 200, elapsed: time.Since(start)}
			if err != nil {
				e := apiErr(t, err)
				a.status, a.retry = e.Status, e.RetryAfter
			}
			answers <- a
		}()
	}
	wg.Wait()
	close(answers)
	counts := map[int]int{}
	for a := range answers {
		counts[a.status]++
		if a.status == 429 {
			if a.elapsed > 500*time.Millisecond { // waiting would take a second or more
				t.Errorf("a 429 took %v: the caller waited instead of being refused at once", a.elapsed)
			}
			if a.retry != time.Second {
				t.Errorf("Retry-After %v", a.retry)
			}
		}
	}
	if counts[200]+counts[429] != n || counts[429] == 0 || counts[200] < 3 {
		t.Fatalf("answers %v: want every request answered once, some 200 and some 429", counts)
	}
	_, _, body := raw(t, h.sock, "GET", "/metrics", "")
	if !strings.Contains(body, fmt.Sprintf("signagent_queue_rejected_total %d", counts[429])) ||
		!strings.Contains(body, fmt.Sprintf(`signagent_requests_total{method="POST",route="/v1/signatures",status="429"} %d`, counts[429])) ||
		!strings.Contains(body, fmt.Sprintf(`signagent_requests_total{method="POST",route="/v1/signatures",status="200"} %d`, counts[200])) {
		t.Fatalf("metrics disagree with %v", counts)
	}
}

// TestDeadlinePassedInQueue: a request whose deadline passes while it waits
// is dropped before it reaches the token.
func TestDeadlinePassedInQueue(t *testing.T) {
	h := start(t, options{workers: 1, delay: 300 * time.Millisecond})
	go h.client.Sign(context.Background(), agentapi.SignatureRequest{Credential: phone}) // holds the token
	eventually(t, 5*time.Second, "the first request to hold the token", func() bool { return h.queue(t).Depth == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := h.client.Sign(ctx, agentapi.SignatureRequest{Credential: phone}); err == nil {
		t.Fatal("signed after its deadline")
	}
	eventually(t, 2*time.Second, "the expired request to be dropped", func() bool { return h.queue(t).Dropped == 1 })
}

// TestTokenRemoval: the real SoftHSM token is taken away (its directory
// moved aside) and put back. While it is out the agent is not ready and
// answers 503 fast; once it is back, requests succeed without a restart.
func TestTokenRemoval(t *testing.T) {
	h := start(t, options{})
	ctx := context.Background()
	if _, err := h.client.Sign(ctx, agentapi.SignatureRequest{Credential: phone}); err != nil {
		t.Fatal(err)
	}
	h.tk.Remove(t)
	_, err := h.client.Sign(ctx, agentapi.SignatureRequest{Credential: phone})
	if e := apiErr(t, err); e.Status != 503 || e.Body.Code != agentapi.CodeTokenNotReady || e.RetryAfter != time.Second {
		t.Fatalf("first failure: %+v", e)
	}
	for range 5 {
		start := time.Now()
		_, err := h.client.Sign(ctx, agentapi.SignatureRequest{Credential: phone})
		if e := apiErr(t, err); e.Status != 503 || e.RetryAfter != time.Second {
			t.Fatalf("while out: %+v", e)
		}
		if d := time.Since(start); d > 900*time.Millisecond { // not waiting for a reconnect (its backoff reaches 1s) or a deadline (10s)
			t.Fatalf("a 503 took %v", d)
		}
	}
	r, err := h.client.Ready(ctx)
	if e := apiErr(t, err); e.Status != 503 || r.Token.Ready || !strings.Contains(r.Token.Reason, "no longer on token") {
		t.Fatalf("readyz while out: %+v %+v", e, r)
	}
	if m := h.metric(t, "signagent_token_ready"); m != "0" {
		t.Fatalf("signagent_token_ready = %s while the token is out", m)
	}
	opensWhileOut := h.opens.Load()
	eventually(t, 6*time.Second, "reconnect attempts", func() bool { return h.opens.Load() > opensWhileOut+1 })

	h.tk.Insert(t)
	back := time.Now()
	eventually(t, 5*time.Second, "the agent to be ready again", func() bool {
		_, err := h.client.Ready(ctx)
		return err == nil
	})
	t.Logf("ready %v after the token came back", time.Since(back))
	if m := h.metric(t, "signagent_token_ready"); m != "1" {
		t.Fatalf("signagent_token_ready = %s after the token came back", m)
	}
	if _, err := h.client.Sign(ctx, agentapi.SignatureRequest{Credential: phone}); err != nil {
		t.Fatalf("after the token came back: %v", err)
	}
}

// TestShutdownWithRequestsInFlight: stopping answers every request in
// flight, then removes the socket.
func TestShutdownWithRequestsInFlight(t *testing.T) {
	h := start(t, options{workers: 1, delay: time.Second})
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := h.client.Sign(context.Background(), agentapi.SignatureRequest{Credential: phone})
			errs <- err
		}()
	}
	eventually(t, 5*time.Second, "requests to be in flight", func() bool { return h.queue(t).Depth == 3 })
	h.shutdown(t)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a request in flight failed: %v", err)
		}
	}
	if _, err := os.Stat(h.sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
}

// TestCardSwapped: a token of the agent's label and another serial and
// PIN is put in the agent's token's place. The agent sends it no PIN and
// answers 503 token_not_ready with one line naming both serials, in
// /readyz too; with its own token back it signs again. At start it warned
// that the token is chosen by label alone, naming the URI with serial=.
func TestCardSwapped(t *testing.T) {
	other := pkcs11test.NewWith(t, pkcs11test.Options{ForProcesses: true}) // made before the agent loads SoftHSM
	other.SetPIN(t, "654321")
	h := start(t, options{})
	ctx := context.Background()
	if !strings.Contains(h.logs.String(), "serial="+h.tk.Serial) || !strings.Contains(h.logs.String(), `"level":"warn"`) {
		t.Fatalf("no warning naming the URI with serial=%s at start:\n%s", h.tk.Serial, h.logs.String())
	}
	h.tk.Remove(t)
	eventually(t, 10*time.Second, "the token to be seen gone", func() bool { return !h.d.Ready() })
	h.tk.PutIn(t, other)
	line := "a different token, serial " + other.Serial + ", is in the reader; this agent's is serial " + h.tk.Serial
	eventually(t, 10*time.Second, "the other token to be looked at", func() bool {
		r, _ := h.client.Ready(ctx)
		return r.Token.Ready || r.Token.PINRejected || strings.Contains(r.Token.Reason, "different token")
	})
	r, err := h.client.Ready(ctx)
	if e := apiErr(t, err); e.Status != 503 || r.Token.Ready || r.Token.PINRejected || !strings.Contains(r.Token.Reason, line) {
		t.Fatalf("readyz with another token in: %+v %+v", e, r.Token)
	}
	_, err = h.client.Sign(ctx, agentapi.SignatureRequest{Credential: phone})
	if e := apiErr(t, err); e.Status != 503 || e.Body.Code != agentapi.CodeTokenNotReady || !strings.Contains(e.Body.Message, line) || strings.Contains(e.Body.Message, "\n") {
		t.Fatalf("signing with another token in: %+v", e)
	}
	h.tk.TakeOut(t)
	h.tk.Insert(t)
	eventually(t, 10*time.Second, "the agent to be ready again", func() bool { return h.d.Ready() })
	if _, err := h.client.Sign(ctx, agentapi.SignatureRequest{Credential: phone}); err != nil {
		t.Fatalf("with the agent's token back: %v", err)
	}
}

// TestNoSecretsInLogs drives every operation, failures included, and checks
// that neither log holds the PIN, the API key, a signature or a Sid.
func TestNoSecretsInLogs(t *testing.T) {
	h := start(t, options{})
	ctx := context.Background()
	var secrets []string
	s, err := h.client.Sign(ctx, agentapi.SignatureRequest{Credential: phone})
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, s.Signature, s.Signature[:40])
	for _, r := range []agentapi.SessionRequest{
		{Credential: phone, ServiceUserID: "crm-42"}, {Credential: phone, ServiceUserID: "crm-42"},
		{Credential: agentapi.Credential{Phone: "9160000000"}, ServiceUserID: "crm-42"},
	} {
		if sess, err := h.client.Session(ctx, r); err == nil {
			secrets = append(secrets, sess.Sid)
		}
	}
	h.client.Link(ctx, "x", "9160000000")
	raw(t, h.sock, "POST", "/v1/signatures", `{"phone":"123"}`)
	h.tk.Remove(t)
	h.client.Sign(ctx, agentapi.SignatureRequest{Credential: phone})
	h.tk.Insert(t)
	for name, log := range map[string]string{"diagnostic": h.logs.String(), "audit": h.audit.String()} {
		if log == "" {
			t.Fatalf("%s log is empty", name)
		}
		for _, secret := range append(secrets, h.tk.PIN, apiKey, strings.ToLower(apiKey), apiKey[:12]) {
			if strings.Contains(log, secret) {
				t.Fatalf("%s log holds a secret (%.8s…):\n%s", name, secret, log)
			}
		}
	}
	for _, want := range []string{`"operation":"sign"`, `"operation":"session"`, `"cached":true`, `"serviceCode":"UserNotFound"`,
		`"credential":"phone=******4567"`, `"keyThumbprint":"`, `"caller":"uid=`, `"latencyMs":`} {
		if !strings.Contains(h.audit.String(), want) {
			t.Errorf("audit log lacks %s", want)
		}
	}
}

// check that agentclient's error type is what callers branch on.
var _ interface{ Temporary() bool } = (*agentclient.Error)(nil)

func signReq() agentapi.SignatureRequest { return agentapi.SignatureRequest{Credential: phone} }

// TestCanonicalHiddenByDefault: the signed text holds the partner's API
// key; callers get it only when the operator says so.
func TestCanonicalHiddenByDefault(t *testing.T) {
	h := start(t, options{})
	code, _, body := raw(t, h.sock, "POST", "/v1/signatures", `{"phone":"9161234567"}`)
	if code != 200 || strings.Contains(body, "canonical") || strings.Contains(strings.ToLower(body), strings.ToLower(apiKey)) {
		t.Fatalf("%d %s", code, body)
	}
}

// TestRouteRules: routes closed per caller class answer 403; the others,
// health and metrics stay open (the rules themselves: agent/access).
func TestRouteRules(t *testing.T) {
	only := func(s string) access.RouteRule {
		r, err := access.ParseRouteRule(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	h := start(t, options{routes: []access.RouteRule{only(fmt.Sprintf("uid:%d=sessions,links", os.Getuid()))}})
	if code, _, body := raw(t, h.sock, "POST", "/v1/signatures", `{"phone":"9161234567"}`); code != 403 || !strings.Contains(body, "route rules") {
		t.Fatalf("signatures closed to this uid: %d %s", code, body)
	}
	if code, _, _ := raw(t, h.sock, "GET", "/readyz", ""); code != 200 {
		t.Fatalf("readyz: %d", code)
	}
	h.reload(t, func(c *agent.Config) { c.Routes = []access.RouteRule{only("unix=signatures")} })
	if code, _, body := raw(t, h.sock, "POST", "/v1/signatures", `{"phone":"9161234567"}`); code != 200 {
		t.Fatalf("signatures open to unix callers: %d %s", code, body)
	}
	if code, _, _ := raw(t, h.sock, "POST", "/v1/links", `{"phone":"9161234567","serviceUserId":"x"}`); code != 403 {
		t.Fatalf("links closed: %d", code)
	}
}
