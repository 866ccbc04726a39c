package metrics

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/signagent/signagent/pkcs11"
)

// signReason sorts failed signatures by what an operator does about them.
func TestSignReason(t *testing.T) {
	for err, want := range map[error]string{
		&pkcs11.TokenError{Op: "log in", Kind: pkcs11.ErrPINLocked}:    "pin_locked",
		&pkcs11.TokenError{Op: "log in", Kind: pkcs11.ErrPINIncorrect}: "pin",
		fmt.Errorf("sign: %w", pkcs11.ErrPINMissing):                   "pin",
		&pkcs11.TokenError{Op: "sign", Kind: pkcs11.ErrTokenTimeout}:   "timeout",
		fmt.Errorf("sign: %w", context.DeadlineExceeded):               "timeout",
		&pkcs11.TokenError{Op: "sign", Kind: pkcs11.ErrDeviceRemoved}:  "device",
		&pkcs11.TokenError{Op: "sign", Kind: pkcs11.ErrDeviceError}:    "device",
		errors.New("the mechanism is not supported"):                   "other",
	} {
		if got := signReason(err); got != want {
			t.Errorf("%v: %s, want %s", err, got, want)
		}
	}
}
