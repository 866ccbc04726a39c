package tokenerr

import (
	"errors"
	"testing"

	p11 "github.com/miekg/pkcs11"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		code        uint
		kind        error
		recoverable bool
	}{
		{p11.CKR_PIN_INCORRECT, ErrPINIncorrect, false},
		{p11.CKR_PIN_LOCKED, ErrPINLocked, false},
		{p11.CKR_TOKEN_NOT_PRESENT, ErrDeviceRemoved, true},
		{p11.CKR_DEVICE_REMOVED, ErrDeviceRemoved, true},
		{p11.CKR_SESSION_HANDLE_INVALID, ErrSessionClosed, true},
		{p11.CKR_SESSION_CLOSED, ErrSessionClosed, true},
		{p11.CKR_OBJECT_HANDLE_INVALID, ErrObjectInvalid, true},
		{p11.CKR_DEVICE_ERROR, ErrDeviceError, true},
		{p11.CKR_CRYPTOKI_NOT_INITIALIZED, ErrNotInitialized, true},
		{p11.CKR_MECHANISM_INVALID, ErrTokenRefused, false},
		{p11.CKR_DATA_LEN_RANGE, ErrTokenRefused, false},
	} {
		err := Classify("sign", p11.Error(tc.code))
		if !errors.Is(err, tc.kind) || Recoverable(err) != tc.recoverable {
			t.Errorf("code %#x: %v (recoverable %v)", tc.code, err, Recoverable(err))
		}
		if c, ok := Code(err); !ok || uint(c) != tc.code {
			t.Errorf("code %#x lost: %v", tc.code, c)
		}
		if Recoverable(p11.Error(tc.code)) != tc.recoverable {
			t.Errorf("bare code %#x: recoverable %v", tc.code, !tc.recoverable)
		}
	}
}
