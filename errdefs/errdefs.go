// Package errdefs holds the kinds of error that every layer of signagent
// shares: each error a user can hit matches one kind with errors.Is, the
// agent turns kinds into HTTP statuses in one table and the CLI into exit
// codes in another. It imports nothing of signagent's.
//
// A package gives its errors a kind in one of two ways: a sentinel made
// with New (errors.Is matches the sentinel and its kind), or an Is method
// on an error type that answers for the kind its fields say (a service's
// 5xx is Failing, its 4xx Refused).
package errdefs

import "errors"

// The kinds.
var (
	// ErrInvalidInput: what the caller passed in is wrong (a flag, a
	// request's field, a file's contents). Fix the input.
	ErrInvalidInput = errors.New("invalid input")
	// ErrNotConfigured: a setting the operation needs is missing or
	// unusable (no API key, no client secret, a key that may not decrypt).
	// Fix the configuration.
	ErrNotConfigured = errors.New("not configured")
	// ErrRefused: the service or the identity provider refused; asking
	// again the same way will be refused again.
	ErrRefused = errors.New("refused")
	// ErrFailing: the service answered that it failed or is limiting
	// requests (5xx, 429 after the retries); try later.
	ErrFailing = errors.New("failing")
	// ErrUnreachable: the service could not be reached, or answered what
	// cannot be used.
	ErrUnreachable = errors.New("unreachable")
	// ErrTimeout: the service did not answer in time.
	ErrTimeout = errors.New("timed out")
	// ErrSignIn: an OpenID Connect profile must sign in (again).
	ErrSignIn = errors.New("sign in again")
	// ErrTryAgain: a moment later the same call may work (the token's
	// queue is full, the service saw this signed text a moment ago).
	ErrTryAgain = errors.New("try again")
	// ErrBackoff: a login that failed a moment ago makes the next wait
	// (a certificate login after the service's challenge failed); ask
	// again after the wait the error says.
	ErrBackoff = errors.New("backing off")
	// ErrTokenNotReady: the token is absent, locked, broken or reconnecting.
	ErrTokenNotReady = errors.New("token not ready")
	// ErrStoreUnavailable: the shared store does not answer.
	ErrStoreUnavailable = errors.New("store unavailable")
	// ErrStoreFormatNewer: a record in the shared store is of a format
	// newer than this agent reads (a newer release wrote it): finish the
	// upgrade or roll back; nothing is to sign in again.
	ErrStoreFormatNewer = errors.New("store format newer")
	// ErrForbidden: this agent's policy does not allow the call.
	ErrForbidden = errors.New("forbidden")
)

// Kinds lists every kind, in the order Kind tries them: an error that
// wraps several (a sign-in needed because the token was not ready) takes
// the first.
var Kinds = []error{
	ErrForbidden, ErrStoreFormatNewer, ErrSignIn, ErrStoreUnavailable, ErrTokenNotReady, ErrBackoff, ErrTryAgain,
	ErrInvalidInput, ErrNotConfigured, ErrTimeout, ErrUnreachable, ErrFailing, ErrRefused,
}

// Kind returns err's kind, or nil when it has none (an internal failure).
func Kind(err error) error {
	if err == nil {
		return nil
	}
	for _, k := range Kinds {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}

// New returns a sentinel error with text msg of the given kind: errors.Is
// matches both the sentinel and kind.
func New(kind error, msg string) error { return &sentinel{msg: msg, kind: kind} }

type sentinel struct {
	msg  string
	kind error
}

func (s *sentinel) Error() string        { return s.msg }
func (s *sentinel) Is(target error) bool { return target == s.kind }

// Mark returns err marked as also being sentinel (errors.Is matches it and
// its kind) without adding sentinel's text: "no API key: give ..." rather
// than "invalid API key: no API key: give ...".
func Mark(err, sentinel error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, mark: sentinel}
}

type marked struct{ err, mark error }

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.err, m.mark} }
