// Package fake is a pkcs11.Backend that fails or hangs on demand, for what
// a real token cannot be made to do at a chosen moment: so that pkcs11,
// agent/tokenq and the commands test a pulled or hung token without
// SoftHSM. The real tokens are pkcs11/pkcs11test's.
package fake

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11"
)

// Backend is a pkcs11.Backend that plays a token with one RSA key and its
// certificate, and fails or hangs on demand. It exists for what a real
// token cannot be made to do at a chosen moment: report a removed device, a
// broken session or a locked PIN in the middle of a call, or never return.
// Everything else is tested on real SoftHSM. Its fields say how it behaves;
// change them with Set while the fake is in use.
type Backend struct {
	mu    sync.Mutex
	Key   *rsa.PrivateKey // the token's key (read-only)
	certs [][]byte        // DER, all with the key's id
	Flags uint            // token flags (CKF_...)
	PIN   string

	calls  map[string]int
	Fail   map[string]error         // op -> error returned once, then removed
	Always map[string]error         // op -> error returned every time
	Hang   map[string]chan struct{} // op -> blocks until closed
	Gone   bool                     // FindObjects finds nothing
	Absent bool                     // GetSlotInfo says the card is out (nothing else does)

	sessions  map[p11.SessionHandle]bool
	next      p11.SessionHandle
	finds     map[p11.SessionHandle][]p11.ObjectHandle
	initDepth int
}

// Slot is the slot the fake's token is in.
const Slot = 7

const (
	fakePriv = p11.ObjectHandle(1)
	fakePub  = p11.ObjectHandle(2)
	fakeCert = p11.ObjectHandle(10) // 10, 11, ... one per certificate
)

// New returns a fake token with a 2048-bit RSA key, the PIN 1234 and
// one certificate valid for the hour around now.
func New(t testing.TB) *Backend {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	f := &Backend{Key: key, PIN: "1234", Flags: p11.CKF_TOKEN_INITIALIZED | p11.CKF_LOGIN_REQUIRED | p11.CKF_USER_PIN_INITIALIZED,
		calls: map[string]int{}, Fail: map[string]error{}, Always: map[string]error{}, Hang: map[string]chan struct{}{},
		sessions: map[p11.SessionHandle]bool{}, finds: map[p11.SessionHandle][]p11.ObjectHandle{}}
	f.AddCert(t, "fake", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	return f
}

// AddCert stores another certificate of the key, valid from nb to na.
func (f *Backend) AddCert(t testing.TB, cn string, nb, na time.Time) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(len(f.certs) + 1)), Subject: pkix.Name{CommonName: cn}, NotBefore: nb, NotAfter: na}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, f.Key.Public(), f.Key)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.certs = append(f.certs, der)
	f.mu.Unlock()
	c, _ := x509.ParseCertificate(der)
	return c
}

// ClearCerts removes the token's certificates.
func (f *Backend) ClearCerts() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.certs = nil
}

// Count says how many times op (a Backend method's name) was called.
func (f *Backend) Count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Set changes the fake under its lock.
func (f *Backend) Set(fn func(f *Backend)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// enter counts op and returns the error it is set to fail with; it blocks
// while op is set to hang.
func (f *Backend) enter(op string) error {
	f.mu.Lock()
	f.calls[op]++
	h := f.Hang[op]
	err, once := f.Fail[op]
	delete(f.Fail, op)
	if !once {
		err = f.Always[op]
	}
	f.mu.Unlock()
	if h != nil {
		<-h
	}
	return err
}

// Initialize is the Backend's Initialize, as the fake is set to answer.
func (f *Backend) Initialize() error {
	if err := f.enter("Initialize"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initDepth++
	return nil
}

// Finalize is the Backend's Finalize, as the fake is set to answer.
func (f *Backend) Finalize() error {
	if err := f.enter("Finalize"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initDepth--
	f.sessions = map[p11.SessionHandle]bool{}
	return nil
}

// Destroy is the Backend's Destroy, as the fake is set to answer.
func (f *Backend) Destroy() { f.enter("Destroy") }

// GetSlotList is the Backend's GetSlotList, as the fake is set to answer.
func (f *Backend) GetSlotList(bool) ([]uint, error) {
	if err := f.enter("GetSlotList"); err != nil {
		return nil, err
	}
	return []uint{Slot}, nil
}

// GetSlotInfo says the token is present unless Absent is set: as OpenSC
// does, the fake's other calls go on answering from memory meanwhile.
func (f *Backend) GetSlotInfo(slot uint) (p11.SlotInfo, error) {
	if err := f.enter("GetSlotInfo"); err != nil {
		return p11.SlotInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Absent {
		return p11.SlotInfo{Flags: p11.CKF_REMOVABLE_DEVICE | p11.CKF_HW_SLOT}, nil
	}
	return p11.SlotInfo{Flags: p11.CKF_TOKEN_PRESENT | p11.CKF_REMOVABLE_DEVICE | p11.CKF_HW_SLOT}, nil
}

// GetTokenInfo is the Backend's GetTokenInfo, as the fake is set to answer.
func (f *Backend) GetTokenInfo(slot uint) (p11.TokenInfo, error) {
	if err := f.enter("GetTokenInfo"); err != nil {
		return p11.TokenInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return p11.TokenInfo{Label: "fake", SerialNumber: "F00D", Flags: f.Flags}, nil
}

// OpenSession is the Backend's OpenSession, as the fake is set to answer.
func (f *Backend) OpenSession(slot uint, flags uint) (p11.SessionHandle, error) {
	if err := f.enter("OpenSession"); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	f.sessions[f.next] = true
	return f.next, nil
}

// CloseSession is the Backend's CloseSession, as the fake is set to answer.
func (f *Backend) CloseSession(sh p11.SessionHandle) error {
	if err := f.enter("CloseSession"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sessions, sh)
	return nil
}

// Sessions is how many sessions are open.
func (f *Backend) Sessions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sessions)
}

// Login is the Backend's Login, as the fake is set to answer.
func (f *Backend) Login(sh p11.SessionHandle, userType uint, pin string) error {
	if err := f.enter("Login"); err != nil {
		return err
	}
	if pin != f.PIN {
		return p11.Error(p11.CKR_PIN_INCORRECT)
	}
	return nil
}

// FindObjectsInit is the Backend's FindObjectsInit, as the fake is set to answer.
func (f *Backend) FindObjectsInit(sh p11.SessionHandle, tmpl []*p11.Attribute) error {
	if err := f.enter("FindObjectsInit"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var class uint
	for _, a := range tmpl {
		if a.Type == p11.CKA_CLASS {
			class = ulong(a.Value)
		}
	}
	var found []p11.ObjectHandle
	if !f.Gone {
		switch class {
		case p11.CKO_PRIVATE_KEY:
			found = []p11.ObjectHandle{fakePriv}
		case p11.CKO_PUBLIC_KEY:
			found = []p11.ObjectHandle{fakePub}
		case p11.CKO_CERTIFICATE:
			for i := range f.certs {
				found = append(found, fakeCert+p11.ObjectHandle(i))
			}
		}
	}
	f.finds[sh] = found
	return nil
}

// FindObjects is the Backend's FindObjects, as the fake is set to answer.
func (f *Backend) FindObjects(sh p11.SessionHandle, max int) ([]p11.ObjectHandle, bool, error) {
	if err := f.enter("FindObjects"); err != nil {
		return nil, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.finds[sh]
	f.finds[sh] = nil
	return out, false, nil
}

// FindObjectsFinal is the Backend's FindObjectsFinal, as the fake is set to answer.
func (f *Backend) FindObjectsFinal(sh p11.SessionHandle) error { return f.enter("FindObjectsFinal") }

// GetAttributeValue is the Backend's GetAttributeValue, as the fake is set to answer.
func (f *Backend) GetAttributeValue(sh p11.SessionHandle, o p11.ObjectHandle, a []*p11.Attribute) ([]*p11.Attribute, error) {
	if err := f.enter("GetAttributeValue"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var v any
	switch t := a[0].Type; {
	case t == p11.CKA_ID:
		v = []byte{1}
	case t == p11.CKA_LABEL:
		v = "fake"
	case o == fakePriv && t == p11.CKA_KEY_TYPE:
		v = p11.CKK_RSA
	case o == fakePriv && (t == p11.CKA_SIGN || t == p11.CKA_DECRYPT):
		v = true
	case o == fakePriv && t == p11.CKA_MODULUS:
		v = f.Key.N.Bytes()
	case o == fakePriv && t == p11.CKA_PUBLIC_EXPONENT:
		v = big.NewInt(int64(f.Key.E)).Bytes()
	case o >= fakeCert && t == p11.CKA_VALUE:
		v = f.certs[o-fakeCert]
	default:
		return nil, p11.Error(p11.CKR_ATTRIBUTE_TYPE_INVALID)
	}
	return []*p11.Attribute{p11.NewAttribute(a[0].Type, v)}, nil
}

// SignInit is the Backend's SignInit, as the fake is set to answer.
func (f *Backend) SignInit(sh p11.SessionHandle, m []*p11.Mechanism, o p11.ObjectHandle) error {
	return f.enter("SignInit")
}

// Sign is the Backend's Sign, as the fake is set to answer.
func (f *Backend) Sign(sh p11.SessionHandle, msg []byte) ([]byte, error) {
	if err := f.enter("Sign"); err != nil {
		return nil, err
	}
	digest := msg[len(msg)-sha256.Size:] // after the DigestInfo prefix
	return rsa.SignPKCS1v15(nil, f.Key, crypto.SHA256, digest)
}

// DecryptInit is the Backend's DecryptInit, as the fake is set to answer.
func (f *Backend) DecryptInit(sh p11.SessionHandle, m []*p11.Mechanism, o p11.ObjectHandle) error {
	return f.enter("DecryptInit")
}

// Decrypt is the Backend's Decrypt, as the fake is set to answer.
func (f *Backend) Decrypt(sh p11.SessionHandle, c []byte) ([]byte, error) {
	if err := f.enter("Decrypt"); err != nil {
		return nil, err
	}
	return rsa.DecryptPKCS1v15(nil, f.Key, c)
}

// The fake's key is RSA: it offers no GOST mechanism (GOST keys are tested
// on the GOST test module).
func (f *Backend) GetMechanismList(slot uint) ([]*p11.Mechanism, error) {
	if err := f.enter("GetMechanismList"); err != nil {
		return nil, err
	}
	return []*p11.Mechanism{p11.NewMechanism(p11.CKM_RSA_PKCS, nil)}, nil
}

// DigestInit is the Backend's DigestInit, as the fake is set to answer.
func (f *Backend) DigestInit(sh p11.SessionHandle, m []*p11.Mechanism) error {
	if err := f.enter("DigestInit"); err != nil {
		return err
	}
	return p11.Error(p11.CKR_MECHANISM_INVALID)
}

// Digest is the Backend's Digest, as the fake is set to answer.
func (f *Backend) Digest(sh p11.SessionHandle, msg []byte) ([]byte, error) {
	return nil, p11.Error(p11.CKR_OPERATION_NOT_INITIALIZED)
}

// GetInfo is the Backend's GetInfo, as the fake is set to answer.
func (f *Backend) GetInfo() (p11.Info, error) {
	if err := f.enter("GetInfo"); err != nil {
		return p11.Info{}, err
	}
	return p11.Info{ManufacturerID: "fake", LibraryDescription: "fake token", CryptokiVersion: p11.Version{Major: 2, Minor: 40}}, nil
}

// GetMechanismInfo is the Backend's GetMechanismInfo, as the fake is set to answer.
func (f *Backend) GetMechanismInfo(slot uint, m []*p11.Mechanism) (p11.MechanismInfo, error) {
	if err := f.enter("GetMechanismInfo"); err != nil {
		return p11.MechanismInfo{}, err
	}
	return p11.MechanismInfo{MinKeySize: 1024, MaxKeySize: 4096, Flags: p11.CKF_SIGN | p11.CKF_DECRYPT}, nil
}

// The fake token has no GOST key: the key-agreement calls are refused.
func (f *Backend) DeriveKey(p11.SessionHandle, []*p11.Mechanism, p11.ObjectHandle, []*p11.Attribute) (p11.ObjectHandle, error) {
	if err := f.enter("DeriveKey"); err != nil {
		return 0, err
	}
	return 0, p11.Error(p11.CKR_FUNCTION_NOT_SUPPORTED)
}

// UnwrapKey is the Backend's UnwrapKey, as the fake is set to answer.
func (f *Backend) UnwrapKey(p11.SessionHandle, []*p11.Mechanism, p11.ObjectHandle, []byte, []*p11.Attribute) (p11.ObjectHandle, error) {
	if err := f.enter("UnwrapKey"); err != nil {
		return 0, err
	}
	return 0, p11.Error(p11.CKR_FUNCTION_NOT_SUPPORTED)
}

// DestroyObject is the Backend's DestroyObject, as the fake is set to answer.
func (f *Backend) DestroyObject(p11.SessionHandle, p11.ObjectHandle) error {
	if err := f.enter("DestroyObject"); err != nil {
		return err
	}
	return p11.Error(p11.CKR_FUNCTION_NOT_SUPPORTED)
}

// ulong reads a CK_ULONG attribute value (native little-endian).
func ulong(b []byte) uint {
	var n uint
	for i := len(b) - 1; i >= 0; i-- {
		n = n<<8 | uint(b[i])
	}
	return n
}

// Setup writes an empty file to stand for the module and a PIN file
// holding pin, and returns a registry that loads the fake in place of the
// module, a selection of the fake's key through it, and a count of the
// loads.
func (f *Backend) Setup(t testing.TB, pin string) (*pkcs11.Registry, pkcs11.Selection, *atomic.Int32) {
	t.Helper()
	lib := filepath.Join(t.TempDir(), "fake.so")
	pinFile := filepath.Join(t.TempDir(), "pin")
	if err := os.WriteFile(lib, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pinFile, []byte(pin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	loads := &atomic.Int32{}
	reg := pkcs11.NewRegistry(func(string) (pkcs11.Backend, error) { loads.Add(1); return f, nil })
	return reg, pkcs11.Selection{Module: lib, Registry: reg, PIN: pkcs11.PINSource{File: pinFile}, Timeout: 5 * time.Second}, loads
}
