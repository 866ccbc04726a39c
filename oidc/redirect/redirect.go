// Package redirect receives the OpenID Connect provider's redirect of an
// authorization-code sign-in in the terminal's process: a listener on the
// loopback redirect address that takes only the redirect carrying the
// sign-in's state, and the address a user pasted instead (--no-browser).
package redirect

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

// Receiver listens on a loopback redirect address for the provider's
// redirect and hands its query to the sign-in.
type Receiver struct {
	srv   *http.Server
	ln    net.Listener
	path  string
	state string // the state this sign-in sent
	got   chan url.Values
}

// Listen starts a receiver for a loopback http redirect URI
// (http://127.0.0.1:PORT/path) for the sign-in that sent state
// (oidc.CodeRequest.State). The URI must name a port: the provider
// redirects to exactly the registered address. Only a redirect that
// carries that state is taken (RFC 6749 4.1.2.1, 10.12):
// any local process or web page can send the browser to this address, and
// a forged redirect (no state, another state, with an error or a code) is
// answered 400 and ignored while the receiver goes on waiting.
func Listen(redirectURI, state string) (*Receiver, error) {
	u, err := url.Parse(redirectURI)
	if err != nil || u.Scheme != "http" || !httpx.IsLoopback(u.Hostname()) || u.Port() == "" {
		return nil, fmt.Errorf("%w: --redirect-uri %q: signagent can receive the redirect only on a loopback http address with a port (http://127.0.0.1:PORT/path); use --no-browser to paste the redirected address instead", errdefs.ErrInvalidInput, redirectURI)
	}
	ln, err := net.Listen("tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot listen on %s for the redirect: %w", errdefs.ErrInvalidInput, u.Host, errors.Unwrap(err))
	}
	r := &Receiver{ln: ln, path: u.Path, state: state, got: make(chan url.Values, 1)}
	if r.path == "" {
		r.path = "/"
	}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

// Redirects delivers the query of the first redirect that carries a code
// or an error.
func (r *Receiver) Redirects() <-chan url.Values { return r.got }

// Close stops listening.
func (r *Receiver) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r.srv.Shutdown(ctx)
}

// ServeHTTP takes the provider's redirect on the registered path (a code
// or an error) and hands its query to Redirects; anything else is 404.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	if req.URL.Path != r.path || (q.Get("code") == "" && q.Get("error") == "") {
		http.NotFound(w, req)
		return
	}
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(r.state)) != 1 {
		page(w, http.StatusBadRequest, "This address was not reached from the sign-in signagent started (its state does not match); it is ignored, and signagent is still waiting.")
		return
	}
	select {
	case r.got <- q:
	default: // a sign-in takes one redirect
	}
	msg := "Signed in. You can close this tab and go back to the terminal."
	if e := q.Get("error"); e != "" {
		msg = "The sign-in did not complete: " + httpx.Printable(e, 40) + ". You can close this tab."
	}
	page(w, http.StatusOK, msg)
}

// page answers the browser with one sentence.
func page(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<!doctype html><html><head><meta charset=\"utf-8\"><title>signagent</title></head><body><p id=\"result\">%s</p></body></html>\n", html.EscapeString(msg))
}

// ParsePasted reads the redirected address a user pasted (the whole URL,
// or just its query).
func ParsePasted(line string) (url.Values, error) {
	line = strings.TrimSpace(line)
	if i := strings.IndexByte(line, '?'); i >= 0 {
		line = line[i+1:]
	}
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	q, err := url.ParseQuery(line)
	if err != nil || (q.Get("code") == "" && q.Get("error") == "") {
		return nil, fmt.Errorf("%w: paste the whole address the browser was sent to (it holds code= and state=)", errdefs.ErrInvalidInput)
	}
	return q, nil
}
