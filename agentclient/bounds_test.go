package agentclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/internal/httpx"
)

// agents serves h as an agent both ways a client reaches one: on a Unix
// socket (NewUnix) and on loopback TCP (NewTCP).
func agents(t *testing.T, h http.Handler) map[string]*Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	unix := httptest.NewUnstartedServer(h)
	unix.Listener.Close()
	unix.Listener = l
	unix.Start()
	t.Cleanup(unix.Close)
	tcp := httptest.NewServer(h)
	t.Cleanup(tcp.Close)
	return map[string]*Client{"unix": NewUnix(sock), "tcp": NewTCP(tcp.URL, "bearer-secret", nil)}
}

// TestHugeHeadRefused: the head of an agent's answer is read up to
// MaxHeaderFields fields and MaxHeaderBytes bytes (a service's head that
// the agent passes on, and the agent's own) and refused past either, on
// both transports, for the JSON calls and the proxied ones, in one line
// (before: net/http's 10 MiB, then 2 MiB, in any number of fields).
func TestHugeHeadRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields int // X-Hn fields
		size   int // bytes of X-Big
		want   string
	}{
		{"100 fields", 100, 0, ""},
		{"3/4 of the bytes", 0, 3 * MaxHeaderBytes / 4, ""},
		{"100,000 tiny fields", 100000, 0, "signagent agent: answered a head of more than 128 header fields, more than signagent reads"},
		{"a field more than allowed", MaxHeaderFields, 0, "signagent agent: answered a head of more than 128 header fields, more than signagent reads"},
		{"3/2 of the bytes", 0, 3 * MaxHeaderBytes / 2, "signagent agent: answered a head larger than 1 MiB, more than signagent reads"},
	} {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for i := range tc.fields {
				w.Header()[fmt.Sprintf("X-H%d", i)] = []string{"v"}
			}
			if tc.size > 0 {
				w.Header().Set("X-Big", strings.Repeat("a", tc.size))
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"status":"ready"}`))
		})
		for name, c := range agents(t, h) {
			_, err := c.Ready(t.Context())
			_, cerr := c.Call(t.Context(), http.MethodGet, "/Method", nil, "oidc profile=p", nil, "")
			var he *httpx.HeadError
			switch {
			case tc.want == "" && (err != nil || cerr != nil):
				t.Fatalf("%s, %s: %v; %v", name, tc.name, err, cerr)
			case tc.want != "" && (err == nil || cerr == nil || err.Error() != tc.want || cerr.Error() != tc.want || !errors.As(err, &he)):
				t.Fatalf("%s, %s: %v; %v", name, tc.name, err, cerr)
			}
		}
	}
}

// TestOversizedJSONAnswerRefused: a JSON answer of the agent is read up to
// 1 MiB and refused past it in one line (before: cut there, and the cut
// part decoded as the answer).
func TestOversizedJSONAnswerRefused(t *testing.T) {
	for _, n := range []int{maxJSONAnswer, maxJSONAnswer + 1} {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			doc := `{"status":"ready"}`
			w.Write([]byte(doc + strings.Repeat(" ", n-len(doc))))
		})
		for name, c := range agents(t, h) {
			ready, err := c.Ready(t.Context())
			if n == maxJSONAnswer {
				if err != nil || ready.Status != "ready" {
					t.Fatalf("%s, an answer of exactly %d bytes: %+v %v", name, n, ready, err)
				}
				continue
			}
			if !errors.Is(err, httpx.ErrAnswerTooLarge) || err.Error() != "signagent agent: HTTP 200: the answer is larger than signagent reads (1 MiB)" {
				t.Fatalf("%s, an answer of %d bytes: %v", name, n, err)
			}
		}
	}
}

// TestSilentAgentBounded: both transports wait for the answer's head at
// most HeaderTimeout, whatever the caller's context, and the TCP one
// bounds its dial and TLS handshake; an agent that never answers ends
// the call with one line (here with the wait shortened).
func TestSilentAgentBounded(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	clients := agents(t, h)
	t.Cleanup(func() { close(release) }) // before the servers close
	for name, c := range clients {
		tr := c.http.Transport.(interface{ Transport() *http.Transport }).Transport()
		if tr.ResponseHeaderTimeout != HeaderTimeout || tr.MaxResponseHeaderBytes != MaxHeaderBytes+1 || tr.DialContext == nil ||
			(name == "tcp" && tr.TLSHandshakeTimeout != dialTimeout) {
			t.Fatalf("%s: head %v, %d bytes, handshake %v", name, tr.ResponseHeaderTimeout, tr.MaxResponseHeaderBytes, tr.TLSHandshakeTimeout)
		}
		tr.ResponseHeaderTimeout = 200 * time.Millisecond
		done := make(chan error, 1)
		go func() {
			_, err := c.Sign(context.Background(), agentapi.SignatureRequest{Credential: agentapi.Credential{Phone: "9161234567"}})
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%s: %v", name, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: a call to an agent that never answers did not end", name)
		}
	}
}
