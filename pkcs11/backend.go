package pkcs11

import (
	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokenerr"
)

// Backend is the narrow set of PKCS#11 calls this package makes. The real one
// is a miekg/pkcs11 context over a loaded module; tests put a fake in its
// place to drive the failure paths a real token cannot be made to show on
// demand (a removed device, a locked PIN, a call that never returns), while
// the main path runs on real SoftHSM.
type Backend interface {
	Initialize() error
	Finalize() error
	Destroy()
	GetSlotList(tokenPresent bool) ([]uint, error)
	// GetSlotInfo is what a reader is asked: a card module (OpenSC)
	// answers GetTokenInfo and GetAttributeValue from memory.
	GetSlotInfo(slot uint) (p11.SlotInfo, error)
	GetTokenInfo(slot uint) (p11.TokenInfo, error)
	OpenSession(slot uint, flags uint) (p11.SessionHandle, error)
	CloseSession(sh p11.SessionHandle) error
	Login(sh p11.SessionHandle, userType uint, pin string) error
	FindObjectsInit(sh p11.SessionHandle, tmpl []*p11.Attribute) error
	FindObjects(sh p11.SessionHandle, max int) ([]p11.ObjectHandle, bool, error)
	FindObjectsFinal(sh p11.SessionHandle) error
	GetAttributeValue(sh p11.SessionHandle, o p11.ObjectHandle, a []*p11.Attribute) ([]*p11.Attribute, error)
	SignInit(sh p11.SessionHandle, m []*p11.Mechanism, o p11.ObjectHandle) error
	Sign(sh p11.SessionHandle, msg []byte) ([]byte, error)
	DecryptInit(sh p11.SessionHandle, m []*p11.Mechanism, o p11.ObjectHandle) error
	Decrypt(sh p11.SessionHandle, ciphertext []byte) ([]byte, error)
	// For GOST keys, which hash on the token.
	GetMechanismList(slot uint) ([]*p11.Mechanism, error)
	DigestInit(sh p11.SessionHandle, m []*p11.Mechanism) error
	Digest(sh p11.SessionHandle, msg []byte) ([]byte, error)
	// For `signagent token check`: what the module says of itself and of
	// each mechanism.
	GetInfo() (p11.Info, error)
	GetMechanismInfo(slot uint, m []*p11.Mechanism) (p11.MechanismInfo, error)
	// For a GOST certificate login: the key agreement, the content key
	// unwrapped, and the session keys destroyed.
	DeriveKey(sh p11.SessionHandle, m []*p11.Mechanism, base p11.ObjectHandle, tmpl []*p11.Attribute) (p11.ObjectHandle, error)
	UnwrapKey(sh p11.SessionHandle, m []*p11.Mechanism, unwrapping p11.ObjectHandle, wrapped []byte, tmpl []*p11.Attribute) (p11.ObjectHandle, error)
	DestroyObject(sh p11.SessionHandle, o p11.ObjectHandle) error
}

// Loader loads the module at path (dlopen and C_GetFunctionList, no
// C_Initialize).
type Loader func(path string) (Backend, error)

// library is the real Backend: a miekg/pkcs11 context over a loaded module.
type library struct{ *p11.Ctx }

// Initialize initializes the module for use from many OS threads
// (CKF_OS_LOCKING_OK): Go runs calls on whichever thread it likes.
func (l library) Initialize() error { return l.Ctx.Initialize() }

// LoadLibrary is the real Loader.
func LoadLibrary(path string) (Backend, error) {
	ctx := p11.New(path)
	if ctx == nil {
		return nil, tokenerr.ErrNotAModule
	}
	return library{ctx}, nil
}
