package pkcs11

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"
)

// staleSigner answers like a token whose object handle was invalidated.
type staleSigner struct {
	crypto.Signer
	calls *int
	err   error
}

func (s staleSigner) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) {
	*s.calls++
	return nil, s.err
}

func TestSignLooksKeyUpAgainOnce(t *testing.T) {
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cert := &x509.Certificate{PublicKey: priv.Public()}
	digest := make([]byte, 32)

	var staleCalls, finds int
	k := &Key{cert: cert, label: "k", log: zerolog.Nop(),
		signer: staleSigner{priv, &staleCalls, p11.Error(p11.CKR_OBJECT_HANDLE_INVALID)}}
	k.find = func() (crypto.Signer, error) { finds++; return priv, nil }
	if _, err := k.Sign(rand.Reader, digest, crypto.SHA256); err != nil {
		t.Fatalf("Sign after a stale handle: %v", err)
	}
	if staleCalls != 1 || finds != 1 {
		t.Fatalf("stale calls %d, finds %d; want 1 and 1", staleCalls, finds)
	}
	// The fresh handle is kept: no further look-up.
	if _, err := k.Sign(rand.Reader, digest, crypto.SHA256); err != nil || finds != 1 {
		t.Fatalf("second Sign: err=%v finds=%d", err, finds)
	}

	// A key found again that is still stale is not looked up in a loop.
	staleCalls, finds = 0, 0
	k.signer = staleSigner{priv, &staleCalls, p11.Error(p11.CKR_OBJECT_HANDLE_INVALID)}
	k.find = func() (crypto.Signer, error) {
		finds++
		return staleSigner{priv, &staleCalls, p11.Error(p11.CKR_OBJECT_HANDLE_INVALID)}, nil
	}
	_, err := k.Sign(rand.Reader, digest, crypto.SHA256)
	if !errors.Is(err, ErrObjectInvalid) || finds != 1 || staleCalls != 2 {
		t.Fatalf("err=%v finds=%d calls=%d", err, finds, staleCalls)
	}

	// A key found again that is another key is refused.
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k.signer = staleSigner{priv, &staleCalls, p11.Error(p11.CKR_KEY_HANDLE_INVALID)}
	k.find = func() (crypto.Signer, error) { return other, nil }
	if _, err := k.Sign(rand.Reader, digest, crypto.SHA256); !errors.Is(err, ErrCertMismatch) {
		t.Fatalf("err=%v, want ErrCertMismatch", err)
	}
}

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
		err := classify("sign", p11.Error(tc.code))
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

func TestParseURI(t *testing.T) {
	u, err := ParseURI("pkcs11:token=My%20Token;serial=ABC;object=signing%20key;id=%01%a2;type=private?module-path=/usr/lib/x.so&pin-source=file:/run/pin")
	if err != nil {
		t.Fatal(err)
	}
	if u.Token != "My Token" || u.Serial != "ABC" || u.Object != "signing key" || string(u.ID) != "\x01\xa2" ||
		u.ModulePath != "/usr/lib/x.so" || u.PINSource != "/run/pin" {
		t.Fatalf("%+v", u)
	}
	for _, bad := range []string{
		"token=x", "pkcs11:token=x;pin-value=1234", "pkcs11:token=x?pin-value=1234",
		"pkcs11:token=%zz", "pkcs11:nonsense", "pkcs11:color=red",
	} {
		if _, err := ParseURI(bad); !errors.Is(err, ErrBadURI) {
			t.Errorf("ParseURI(%q) err=%v", bad, err)
		}
	}
}

func FuzzParseURI(f *testing.F) {
	f.Add("pkcs11:token=a;object=b;id=%01?module-path=/x&pin-source=/p")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseURI(s)
		if err == nil && u == nil {
			t.Fatal("nil URI without error")
		}
	})
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
		if !ok && (!errors.Is(err, ErrSecretFileMode) || !errors.Is(err, ErrPINMissing) || strings.Contains(err.Error(), "123456")) {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
}
