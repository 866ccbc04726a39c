package pkcs11

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/safefile"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		code        uint
		kind        error
		recoverable bool
	}{
		{p11.CKR_PIN_INCORRECT, tokenerr.ErrPINIncorrect, false},
		{p11.CKR_PIN_LOCKED, tokenerr.ErrPINLocked, false},
		{p11.CKR_TOKEN_NOT_PRESENT, tokenerr.ErrDeviceRemoved, true},
		{p11.CKR_DEVICE_REMOVED, tokenerr.ErrDeviceRemoved, true},
		{p11.CKR_SESSION_HANDLE_INVALID, tokenerr.ErrSessionClosed, true},
		{p11.CKR_SESSION_CLOSED, tokenerr.ErrSessionClosed, true},
		{p11.CKR_OBJECT_HANDLE_INVALID, tokenerr.ErrObjectInvalid, true},
		{p11.CKR_DEVICE_ERROR, tokenerr.ErrDeviceError, true},
		{p11.CKR_CRYPTOKI_NOT_INITIALIZED, tokenerr.ErrNotInitialized, true},
		{p11.CKR_MECHANISM_INVALID, tokenerr.ErrTokenRefused, false},
		{p11.CKR_DATA_LEN_RANGE, tokenerr.ErrTokenRefused, false},
	} {
		err := tokenerr.Classify("sign", p11.Error(tc.code))
		if !errors.Is(err, tc.kind) || tokenerr.Recoverable(err) != tc.recoverable {
			t.Errorf("code %#x: %v (recoverable %v)", tc.code, err, tokenerr.Recoverable(err))
		}
		if c, ok := tokenerr.Code(err); !ok || uint(c) != tc.code {
			t.Errorf("code %#x lost: %v", tc.code, c)
		}
		if tokenerr.Recoverable(p11.Error(tc.code)) != tc.recoverable {
			t.Errorf("bare code %#x: recoverable %v", tc.code, !tc.recoverable)
		}
	}
}

func TestSecretFileModes(t *testing.T) {
	dir := t.TempDir()
	for mode, ok := range map[os.FileMode]bool{0o600: true, 0o400: true, 0o640: true, 0o644: false, 0o606: false, 0o666: false} {
		p := filepath.Join(dir, fmt.Sprintf("pin-%o", mode))
		os.WriteFile(p, []byte("123456\n"), 0o600)
		os.Chmod(p, mode)
		pin, err := ReadPINFile(p)
		if ok != (err == nil) {
			t.Errorf("mode %04o: err=%v", mode, err)
		}
		if ok && pin != "123456" {
			t.Errorf("mode %04o: pin %q", mode, pin)
		}
		if !ok && (!errors.Is(err, safefile.ErrSecretMode) || !errors.Is(err, tokenerr.ErrPINMissing) || strings.Contains(err.Error(), "123456")) {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
}
