// Package tokenerr is what a PKCS#11 module's failures mean to an operator:
// the sentinels a caller branches on with errors.Is, TokenError (the
// operation, the CKR_ value, its kind and what to do), and Classify, which
// turns a module's return value into one. It needs nothing of package
// pkcs11, which imports it.
package tokenerr

import (
	"context"
	"errors"
	"fmt"
	"strings"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/pkcs11/locate"
)

// Errors a caller can branch on with errors.Is. Each one's text names the fix.
var (
	ErrModuleNotFound   = locate.ErrModuleNotFound
	ErrNotAModule       = locate.ErrNotAModule
	ErrModuleFailed     = errors.New("the PKCS#11 module failed to start")
	ErrTokenNotFound    = errdefs.New(errdefs.ErrInvalidInput, "token not found")
	ErrTokenAmbiguous   = errdefs.New(errdefs.ErrInvalidInput, "more than one token matches")
	ErrPINIncorrect     = errdefs.New(errdefs.ErrTokenNotReady, "the token rejected the PIN")
	ErrPINLocked        = errdefs.New(errdefs.ErrTokenNotReady, "the token's PIN is locked")
	ErrPINMissing       = errdefs.New(errdefs.ErrNotConfigured, "no PIN")
	ErrKeyNotFound      = errdefs.New(errdefs.ErrInvalidInput, "key not found")
	ErrKeyAmbiguous     = errdefs.New(errdefs.ErrInvalidInput, "more than one key matches")
	ErrCertNotFound     = errdefs.New(errdefs.ErrInvalidInput, "certificate not found")
	ErrCertMismatch     = errdefs.New(errdefs.ErrInvalidInput, "the certificate does not belong to the key")
	ErrCertAmbiguous    = errdefs.New(errdefs.ErrInvalidInput, "more than one certificate matches")
	ErrObjectInvalid    = errdefs.New(errdefs.ErrTokenNotReady, "the token no longer knows the key's handle")
	ErrSessionClosed    = errdefs.New(errdefs.ErrTokenNotReady, "the token session was closed")
	ErrDeviceRemoved    = errdefs.New(errdefs.ErrTokenNotReady, "the token was removed")
	ErrDeviceError      = errdefs.New(errdefs.ErrTokenNotReady, "the token reported a device error")
	ErrNotInitialized   = errdefs.New(errdefs.ErrTokenNotReady, "the PKCS#11 module is not initialized")
	ErrBadURI           = errdefs.New(errdefs.ErrInvalidInput, "invalid pkcs11 URI")
	ErrBadSelection     = errdefs.New(errdefs.ErrInvalidInput, "invalid key selection")
	ErrTokenUnavailable = errdefs.New(errdefs.ErrTokenNotReady, "the token is not available")
	ErrTokenRefused     = errors.New("the token refused the operation")
	ErrTokenTimeout     = errdefs.New(errdefs.ErrTokenNotReady, "the token did not answer in time")
	// ErrTokenBusy: a check did not get its answer in time, but the token
	// answered other operations meanwhile (a slow card kept busy): it is
	// there; not a reason to reconnect.
	ErrTokenBusy   = errdefs.New(errdefs.ErrTryAgain, "the token is busy: a check waited behind operations it went on answering")
	ErrTokenLost   = errdefs.New(errdefs.ErrTokenNotReady, "the token lost the key")
	ErrPINFinalTry = errors.New("the token allows one more PIN try")
	ErrLoginFailed = errdefs.New(errdefs.ErrTokenNotReady, "the token failed while checking the PIN")
	ErrKeyUsage    = errdefs.New(errdefs.ErrNotConfigured, "the key may not be used for this")
)

// TokenError is a PKCS#11 failure with the operation that was being attempted.
type TokenError struct {
	Op   string    // what was being attempted, e.g. "log in"
	Code p11.Error // the CKR_ value, 0 when none
	Kind error     // one of the Err* sentinels
	Hint string    // what to do about it
	Err  error     // the underlying error
}

// Error is the error's one line.
func (e *TokenError) Error() string {
	var b strings.Builder
	b.WriteString("could not ")
	b.WriteString(e.Op)
	b.WriteString(": ")
	b.WriteString(e.Kind.Error())
	if e.Code != 0 {
		fmt.Fprintf(&b, " (%s)", CodeName(e.Code))
	}
	if e.Hint != "" {
		b.WriteString("; ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

// Unwrap lets errors.Is match both the sentinel and the underlying error.
func (e *TokenError) Unwrap() []error { return []error{e.Kind, e.Err} }

// CodeName is a CKR_ code's name, or its value in hex.
func CodeName(c p11.Error) string {
	// miekg/pkcs11 prints "pkcs11: 0xA0: CKR_PIN_INCORRECT"; keep the name.
	s := c.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// Code returns the PKCS#11 return value wrapped in err, if there is one.
func Code(err error) (p11.Error, bool) {
	var c p11.Error
	if errors.As(err, &c) {
		return c, true
	}
	return 0, false
}

// Classify turns an error from the module into a *TokenError whose Kind
// says what happened and whose message says what to do. Errors that are not
// PKCS#11 return values pass through, wrapped with the operation; a
// TokenError is returned as it is.
func Classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var te *TokenError
	if errors.As(err, &te) {
		return err
	}
	code, ok := Code(err)
	if !ok {
		return fmt.Errorf("could not %s: %w", op, err)
	}
	hint, kind := kindOf(code)
	return &TokenError{Op: op, Code: code, Kind: kind, Hint: hint, Err: err}
}

// ClassifyLogin is Classify for what C_Login returned (session.go,
// list.go, and code that logs in itself): a general failure there is
// ErrLoginFailed (below).
func ClassifyLogin(op string, err error) error {
	err = Classify(op, err)
	if te, ok := err.(*TokenError); ok && (te.Code == p11.CKR_GENERAL_ERROR || te.Code == p11.CKR_FUNCTION_FAILED) {
		te.Hint, te.Kind = loginFailedHint, ErrLoginFailed
	}
	return err
}

// A general failure of C_Login is not a token gone away: the card got the
// PIN and answered with a status the driver has no name for. OpenSC says
// CKR_GENERAL_ERROR when libcacard's card answers a wrong PIN 6985, and a
// card behind such a driver may have counted the try. So it is not
// recoverable: sending the PIN again on every reconnect would lock the
// card. A reader stack that is down fails before C_Login (the token is not
// found), and a broken exchange is CKR_DEVICE_ERROR or CKR_DEVICE_REMOVED,
// which stay recoverable.
const loginFailedHint = "the card may have counted this as a wrong PIN, so it is not sent again; check the PIN and the reader, then run again (the agent: send SIGHUP)"

// kindOf returns what to do about a return value, and its sentinel.
func kindOf(code p11.Error) (hint string, kind error) {
	switch code {
	case p11.CKR_PIN_INCORRECT, p11.CKR_PIN_INVALID, p11.CKR_PIN_LEN_RANGE:
		return "check SIGNAGENT_PIN or the PIN file; the card locks after a few wrong tries, so do not retry blindly", ErrPINIncorrect
	case p11.CKR_PIN_LOCKED, p11.CKR_PIN_EXPIRED:
		return "unblock the PIN with the security officer PIN (for SoftHSM: softhsm2-util or pkcs11-tool --unlock-pin)", ErrPINLocked
	case p11.CKR_TOKEN_NOT_PRESENT, p11.CKR_DEVICE_REMOVED, p11.CKR_TOKEN_NOT_RECOGNIZED, p11.CKR_SLOT_ID_INVALID:
		return "insert the card or reconnect the HSM; `signagent token list` lists what the module sees", ErrDeviceRemoved
	case p11.CKR_SESSION_HANDLE_INVALID, p11.CKR_SESSION_CLOSED:
		return "the session will be reopened; if this repeats, check the token's connection", ErrSessionClosed
	case p11.CKR_OBJECT_HANDLE_INVALID, p11.CKR_KEY_HANDLE_INVALID:
		return "the key was deleted or the token was reset; `signagent token keys` lists the keys", ErrObjectInvalid
	case p11.CKR_DEVICE_ERROR, p11.CKR_DEVICE_MEMORY, p11.CKR_GENERAL_ERROR, p11.CKR_FUNCTION_FAILED:
		return "check the reader and the token; reconnecting it often helps", ErrDeviceError
	case p11.CKR_CRYPTOKI_NOT_INITIALIZED:
		return "the module was finalized; the connection will be reopened", ErrNotInitialized
	case p11.CKR_USER_NOT_LOGGED_IN, p11.CKR_USER_PIN_NOT_INITIALIZED:
		return "the token needs a PIN: set SIGNAGENT_PIN or --pin-file", ErrPINMissing
	}
	return "the key or token may not support this operation; `signagent token keys` shows the key's type", ErrTokenRefused
}

// Recoverable reports whether err means the token went away or its session
// broke, so that reconnecting may help. A wrong or locked PIN is not
// recoverable: retrying it would lock the card; nor is a failure of the
// login itself (ErrLoginFailed), where the card may have counted the PIN.
func Recoverable(err error) bool {
	var te *TokenError
	if code, ok := Code(err); ok && !errors.As(err, &te) {
		// A bare return value, not yet classified, counts by its kind.
		_, kind := kindOf(code)
		err = errors.Join(err, kind)
	}
	for _, k := range []error{ErrDeviceRemoved, ErrSessionClosed, ErrDeviceError, ErrNotInitialized, ErrObjectInvalid, ErrTokenUnavailable, ErrTokenTimeout, ErrTokenLost} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// IsCode reports whether err wraps the PKCS#11 return value code.
func IsCode(err error, code uint) bool {
	c, ok := Code(err)
	return ok && uint(c) == code
}

// NotAModule is the error for a file that is not a PKCS#11 module.
func NotAModule(path string) error {
	return fmt.Errorf("%w: %s could not be loaded as a shared library with C_GetFunctionList", ErrNotAModule, path)
}

// Timeout is the error for an operation that ran out of time (err: the
// context's); a cancelled one is left as it is.
func Timeout(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrTokenTimeout, err)
}
