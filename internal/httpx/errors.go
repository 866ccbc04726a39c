package httpx

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/signagent/signagent/errdefs"
)

// TransportError is a request of a scheme's or the service's client that
// got no usable HTTP answer: the connection failed, the answer did not
// come in time, or what came is not what the protocol answers. Its kind
// is errdefs.ErrTimeout when no answer came in time, else
// errdefs.ErrUnreachable. It is the one such type of every client
// (trusted, legacy, oidc, service).
type TransportError struct {
	// Step is what was asked: a step of a flow or a call of the service's
	// (trusted, legacy, OpenID Connect), which the agent's answers name
	// (Detail). Method is a business method instead (service, the
	// proxy), which the caller named itself: the answers leave it out.
	Step, Method string
	// URL is where it was asked, without a secret or a query.
	URL string
	// Peer, when set, names who was asked, as Msg's subject (the
	// identity provider): the error reads "STEP: PEER at URL MSG".
	Peer string
	// Msg, when set, says what came instead of an answer; without it the
	// error says that URL could not be reached, or not in time.
	Msg string
	// Timeout: the deadline passed before an answer (as does an Err that
	// is context.DeadlineExceeded).
	Timeout bool
	Err     error
}

// Error says what was attempted and the transport's error, made
// printable.
func (e *TransportError) Error() string {
	what := cmp.Or(e.Step, e.Method)
	var he *HeadError
	switch {
	case e.Msg != "" && e.Peer != "":
		return fmt.Sprintf("%s: %s at %s %s", what, e.Peer, e.URL, e.Msg)
	case e.Msg != "":
		return what + ": " + e.Msg
	case errors.As(e.Err, &he):
		return fmt.Sprintf("%s: %s answered %v", what, e.URL, he)
	case e.Timeout:
		return fmt.Sprintf("%s: no answer from %s in time: %v", what, e.URL, e.Err)
	}
	return fmt.Sprintf("%s: could not reach %s: %v", what, e.URL, e.Err)
}

// Unwrap is the transport's error.
func (e *TransportError) Unwrap() error { return e.Err }

// Is gives the error its kind: errdefs.ErrTimeout or errdefs.ErrUnreachable.
func (e *TransportError) Is(target error) bool {
	if e.Timeout || errors.Is(e.Err, context.DeadlineExceeded) {
		return target == errdefs.ErrTimeout
	}
	return target == errdefs.ErrUnreachable
}

// Detail returns the step (not a business method), for an API answer.
func (e *TransportError) Detail() (code, step string) { return "", e.Step }

// AnswerLine is the one line of an answer that refused a call (the
// scheme clients' and the service client's error types): "CALL: PEER
// answered HTTP STATUS CODE: TEXT; HINT", each part left out when empty
// (the status when 0).
func AnswerLine(call, peer string, status int, code, text, hint string) string {
	msg := call + ": " + peer + " answered"
	if status != 0 {
		msg += fmt.Sprintf(" HTTP %d", status)
	}
	if code != "" {
		msg += " " + code
	}
	if text != "" {
		msg += ": " + text
	}
	if hint != "" {
		msg += "; " + hint
	}
	return msg
}

// Failing reports whether an answer's status says the peer failed or is
// limiting requests (5xx, 429 Too Many Requests): trying again later may
// help, and its kind is errdefs.ErrFailing.
func Failing(status int) bool {
	return status >= 500 || status == http.StatusTooManyRequests
}
