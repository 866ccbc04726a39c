package pkcs11

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"sync"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"
)

// fakeToken is a Backend that plays a token with one RSA key and its
// certificate, and fails or hangs on demand. It exists for what a real
// token cannot be made to do at a chosen moment: report a removed device, a
// broken session or a locked PIN in the middle of a call, or never return.
// Everything else is tested on real SoftHSM.
type fakeToken struct {
	mu    sync.Mutex
	key   *rsa.PrivateKey
	certs [][]byte // DER, all with the key's id
	flags uint     // token flags
	pin   string

	calls  map[string]int
	fail   map[string]error         // op -> error returned once, then removed
	always map[string]error         // op -> error returned every time
	hang   map[string]chan struct{} // op -> blocks until closed
	gone   bool                     // FindObjects finds nothing
	absent bool                     // GetSlotInfo says the card is out (nothing else does)

	sessions  map[p11.SessionHandle]bool
	next      p11.SessionHandle
	finds     map[p11.SessionHandle][]p11.ObjectHandle
	initDepth int
}

const (
	fakeSlot = 7
	fakePriv = p11.ObjectHandle(1)
	fakePub  = p11.ObjectHandle(2)
	fakeCert = p11.ObjectHandle(10) // 10, 11, ... one per certificate
)

func newFakeToken(t testing.TB) *fakeToken {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeToken{key: key, pin: "1234", flags: p11.CKF_TOKEN_INITIALIZED | p11.CKF_LOGIN_REQUIRED | p11.CKF_USER_PIN_INITIALIZED,
		calls: map[string]int{}, fail: map[string]error{}, always: map[string]error{}, hang: map[string]chan struct{}{},
		sessions: map[p11.SessionHandle]bool{}, finds: map[p11.SessionHandle][]p11.ObjectHandle{}}
	f.addCert(t, "fake", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	return f
}

// addCert stores another certificate of the key, valid from nb to na.
func (f *fakeToken) addCert(t testing.TB, cn string, nb, na time.Time) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(len(f.certs) + 1)), Subject: pkix.Name{CommonName: cn}, NotBefore: nb, NotAfter: na}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, f.key.Public(), f.key)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.certs = append(f.certs, der)
	f.mu.Unlock()
	c, _ := x509.ParseCertificate(der)
	return c
}

func (f *fakeToken) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *fakeToken) set(fn func(f *fakeToken)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// enter counts op and returns the error it is set to fail with; it blocks
// while op is set to hang.
func (f *fakeToken) enter(op string) error {
	f.mu.Lock()
	f.calls[op]++
	h := f.hang[op]
	err, once := f.fail[op]
	delete(f.fail, op)
	if !once {
		err = f.always[op]
	}
	f.mu.Unlock()
	if h != nil {
		<-h
	}
	return err
}

func (f *fakeToken) Initialize() error {
	if err := f.enter("Initialize"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initDepth++
	return nil
}

func (f *fakeToken) Finalize() error {
	if err := f.enter("Finalize"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initDepth--
	f.sessions = map[p11.SessionHandle]bool{}
	return nil
}

func (f *fakeToken) Destroy() { f.enter("Destroy") }

func (f *fakeToken) GetSlotList(bool) ([]uint, error) {
	if err := f.enter("GetSlotList"); err != nil {
		return nil, err
	}
	return []uint{fakeSlot}, nil
}

// GetSlotInfo says the token is present unless absent is set: as OpenSC
// does, the fake's other calls go on answering from memory meanwhile.
func (f *fakeToken) GetSlotInfo(slot uint) (p11.SlotInfo, error) {
	if err := f.enter("GetSlotInfo"); err != nil {
		return p11.SlotInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.absent {
		return p11.SlotInfo{Flags: p11.CKF_REMOVABLE_DEVICE | p11.CKF_HW_SLOT}, nil
	}
	return p11.SlotInfo{Flags: p11.CKF_TOKEN_PRESENT | p11.CKF_REMOVABLE_DEVICE | p11.CKF_HW_SLOT}, nil
}

func (f *fakeToken) GetTokenInfo(slot uint) (p11.TokenInfo, error) {
	if err := f.enter("GetTokenInfo"); err != nil {
		return p11.TokenInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return p11.TokenInfo{Label: "fake", SerialNumber: "F00D", Flags: f.flags}, nil
}

func (f *fakeToken) OpenSession(slot uint, flags uint) (p11.SessionHandle, error) {
	if err := f.enter("OpenSession"); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	f.sessions[f.next] = true
	return f.next, nil
}

func (f *fakeToken) CloseSession(sh p11.SessionHandle) error {
	if err := f.enter("CloseSession"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sessions, sh)
	return nil
}

func (f *fakeToken) open() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sessions)
}

func (f *fakeToken) Login(sh p11.SessionHandle, userType uint, pin string) error {
	if err := f.enter("Login"); err != nil {
		return err
	}
	if pin != f.pin {
		return p11.Error(p11.CKR_PIN_INCORRECT)
	}
	return nil
}

func (f *fakeToken) FindObjectsInit(sh p11.SessionHandle, tmpl []*p11.Attribute) error {
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
	if !f.gone {
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

func (f *fakeToken) FindObjects(sh p11.SessionHandle, max int) ([]p11.ObjectHandle, bool, error) {
	if err := f.enter("FindObjects"); err != nil {
		return nil, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.finds[sh]
	f.finds[sh] = nil
	return out, false, nil
}

func (f *fakeToken) FindObjectsFinal(sh p11.SessionHandle) error { return f.enter("FindObjectsFinal") }

func (f *fakeToken) GetAttributeValue(sh p11.SessionHandle, o p11.ObjectHandle, a []*p11.Attribute) ([]*p11.Attribute, error) {
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
		v = f.key.N.Bytes()
	case o == fakePriv && t == p11.CKA_PUBLIC_EXPONENT:
		v = big.NewInt(int64(f.key.E)).Bytes()
	case o >= fakeCert && t == p11.CKA_VALUE:
		v = f.certs[o-fakeCert]
	default:
		return nil, p11.Error(p11.CKR_ATTRIBUTE_TYPE_INVALID)
	}
	return []*p11.Attribute{p11.NewAttribute(a[0].Type, v)}, nil
}

func (f *fakeToken) SignInit(sh p11.SessionHandle, m []*p11.Mechanism, o p11.ObjectHandle) error {
	return f.enter("SignInit")
}

func (f *fakeToken) Sign(sh p11.SessionHandle, msg []byte) ([]byte, error) {
	if err := f.enter("Sign"); err != nil {
		return nil, err
	}
	digest := msg[len(digestInfoPrefix[crypto.SHA256]):]
	return rsa.SignPKCS1v15(nil, f.key, crypto.SHA256, digest)
}

func (f *fakeToken) DecryptInit(sh p11.SessionHandle, m []*p11.Mechanism, o p11.ObjectHandle) error {
	return f.enter("DecryptInit")
}

func (f *fakeToken) Decrypt(sh p11.SessionHandle, c []byte) ([]byte, error) {
	if err := f.enter("Decrypt"); err != nil {
		return nil, err
	}
	return rsa.DecryptPKCS1v15(nil, f.key, c)
}

// The fake's key is RSA: it offers no GOST mechanism (GOST keys are tested
// on the GOST test module).
func (f *fakeToken) GetMechanismList(slot uint) ([]*p11.Mechanism, error) {
	if err := f.enter("GetMechanismList"); err != nil {
		return nil, err
	}
	return []*p11.Mechanism{p11.NewMechanism(p11.CKM_RSA_PKCS, nil)}, nil
}

func (f *fakeToken) DigestInit(sh p11.SessionHandle, m []*p11.Mechanism) error {
	if err := f.enter("DigestInit"); err != nil {
		return err
	}
	return p11.Error(p11.CKR_MECHANISM_INVALID)
}

func (f *fakeToken) Digest(sh p11.SessionHandle, msg []byte) ([]byte, error) {
	return nil, p11.Error(p11.CKR_OPERATION_NOT_INITIALIZED)
}

func (f *fakeToken) GetInfo() (p11.Info, error) {
	if err := f.enter("GetInfo"); err != nil {
		return p11.Info{}, err
	}
	return p11.Info{ManufacturerID: "fake", LibraryDescription: "fake token", CryptokiVersion: p11.Version{Major: 2, Minor: 40}}, nil
}

func (f *fakeToken) GetMechanismInfo(slot uint, m []*p11.Mechanism) (p11.MechanismInfo, error) {
	if err := f.enter("GetMechanismInfo"); err != nil {
		return p11.MechanismInfo{}, err
	}
	return p11.MechanismInfo{MinKeySize: 1024, MaxKeySize: 4096, Flags: p11.CKF_SIGN | p11.CKF_DECRYPT}, nil
}

// The fake token has no GOST key: the key-agreement calls are refused.
func (f *fakeToken) DeriveKey(p11.SessionHandle, []*p11.Mechanism, p11.ObjectHandle, []*p11.Attribute) (p11.ObjectHandle, error) {
	if err := f.enter("DeriveKey"); err != nil {
		return 0, err
	}
	return 0, p11.Error(p11.CKR_FUNCTION_NOT_SUPPORTED)
}

func (f *fakeToken) UnwrapKey(p11.SessionHandle, []*p11.Mechanism, p11.ObjectHandle, []byte, []*p11.Attribute) (p11.ObjectHandle, error) {
	if err := f.enter("UnwrapKey"); err != nil {
		return 0, err
	}
	return 0, p11.Error(p11.CKR_FUNCTION_NOT_SUPPORTED)
}

func (f *fakeToken) DestroyObject(p11.SessionHandle, p11.ObjectHandle) error {
	if err := f.enter("DestroyObject"); err != nil {
		return err
	}
	return p11.Error(p11.CKR_FUNCTION_NOT_SUPPORTED)
}
