package httpx

import (
	"context"
	"errors"
	"testing"

	"github.com/signagent/signagent/errdefs"
)

// TestTransportError: the kind (timeout by the flag or by the deadline,
// else unreachable), the one line for each shape the clients make, and a
// step named in answers while a business method is not.
func TestTransportError(t *testing.T) {
	refused := errors.New("connection refused")
	for _, c := range []struct {
		e      *TransportError
		kind   error
		text   string
		detail string
	}{
		{&TransportError{Step: "link", URL: "https://svc/x", Err: refused}, errdefs.ErrUnreachable, "link: could not reach https://svc/x: connection refused", "link"},
		{&TransportError{Step: "link", URL: "https://svc/x", Timeout: true, Err: refused}, errdefs.ErrTimeout, "link: no answer from https://svc/x in time: connection refused", "link"},
		{&TransportError{Step: "discovery", URL: "https://idp", Peer: "the identity provider", Msg: "answered HTTP 500"}, errdefs.ErrUnreachable, "discovery: the identity provider at https://idp answered HTTP 500", "discovery"},
		{&TransportError{Method: "GetMyOrganizations", Msg: "no answer in time", Err: context.DeadlineExceeded}, errdefs.ErrTimeout, "GetMyOrganizations: no answer in time", ""},
	} {
		if got := c.e.Error(); got != c.text {
			t.Errorf("text %q, want %q", got, c.text)
		}
		if !errors.Is(c.e, c.kind) {
			t.Errorf("%s: not of kind %v", c.text, c.kind)
		}
		if _, step := c.e.Detail(); step != c.detail {
			t.Errorf("%s: step %q, want %q", c.text, step, c.detail)
		}
	}
}

// TestAnswerLine: the refusal's one line with every part, and each part
// left out when empty (the status when 0); Failing for 5xx and 429 only.
func TestAnswerLine(t *testing.T) {
	for _, c := range []struct {
		status           int
		code, text, hint string
		want             string
	}{
		{401, "Http.Auth", "no key", "check the key", "Authenticate: the service answered HTTP 401 Http.Auth: no key; check the key"},
		{403, "", "", "", "Authenticate: the service answered HTTP 403"},
		{0, "invalid_grant", "", "sign in again", "Authenticate: the service answered invalid_grant; sign in again"},
	} {
		if got := AnswerLine("Authenticate", "the service", c.status, c.code, c.text, c.hint); got != c.want {
			t.Errorf("AnswerLine(%d, %q, %q, %q) = %q, want %q", c.status, c.code, c.text, c.hint, got, c.want)
		}
	}
	for status, want := range map[int]bool{200: false, 400: false, 401: false, 429: true, 500: true, 503: true} {
		if Failing(status) != want {
			t.Errorf("Failing(%d) = %v, want %v", status, !want, want)
		}
	}
}
