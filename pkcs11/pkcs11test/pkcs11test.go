// Package pkcs11test gives each test its own SoftHSM token: a configuration and
// token directory under t.TempDir(), selected through SOFTHSM2_CONF for the
// duration of the test, with an RSA-2048 and a P-256 key generated on the
// token (sensitive, not extractable) and certificates stored next to them.
// The keys are generated once per test binary and shape of token and the
// token's files copied into each test's directory (see copies.go): each
// test still has a token of its own, with its own PIN tries and its own
// faults, and two tokens in one test hold different keys.
//
// Tests that use it cannot run in parallel with each other: SoftHSM reads
// SOFTHSM2_CONF when the module is initialized, once per process.
//
// It also starts cards behind pcscd and OpenSC (the card rig): NewCard, a
// CAC card with RSA keys (libcacard), and NewGOSTCard, a Rutoken ECP with a
// GOST key on CryptoPro-A that OpenSC signs with through raw CKM_GOSTR3410
// only (package rutoken; gostcard.go says what a test gets: the module,
// the token label and serial, the PIN and its file, Selection, the public
// key, removal, a slow card, two cards).
package pkcs11test

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/locate"
	"github.com/signagent/signagent/pkcs11/softhsm"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// KeyRef names a key on the test token.
type KeyRef struct {
	Label string
	ID    []byte
	Cert  *x509.Certificate
}

// Token is an isolated SoftHSM token.
type Token struct {
	Dir     string // the token's own directory
	Conf    string // its softhsm2.conf
	Module  string // the SoftHSM module path
	Label   string
	Serial  string
	PIN     string
	SOPIN   string
	PINFile string // a 0600 file holding PIN
	RSA     KeyRef
	EC      KeyRef
}

// Options shapes a test token.
type Options struct {
	Label string
	// Extra keys generated after the RSA and P-256 ones.
	Extra []softhsm.KeySpec
	// ForProcesses leaves the test's environment alone: the token is for
	// the processes the test starts, each given tk.Env(), so the test may
	// run in parallel with others (t.Setenv forbids t.Parallel). Without it
	// SOFTHSM2_CONF names the token for the test's own process, as the
	// in-process tests need.
	ForProcesses bool
}

// Module returns the SoftHSM module path, failing the test when SoftHSM is
// not installed (`make test` installs it).
func Module(t testing.TB) string {
	t.Helper()
	for _, p := range locate.SoftHSMModules {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("SoftHSM is not installed; `make test` installs it (apt-get install softhsm2)")
	return ""
}

// New creates an isolated token with the default keys.
func New(t testing.TB) *Token { return NewWith(t, Options{}) }

// NewWith creates an isolated token shaped by o.
func NewWith(t testing.TB, o Options) *Token {
	t.Helper()
	if o.Label == "" {
		o.Label = "signagent-test" // one shape of token, named or not (copies.go)
	}
	tk := &Token{Module: Module(t), Dir: t.TempDir(), Label: o.Label, PIN: "123456", SOPIN: "12345678"}
	conf, err := softhsm.WriteConfig(tk.Dir)
	if err != nil {
		t.Fatal(err)
	}
	tk.Conf = conf
	if !o.ForProcesses {
		t.Setenv(softhsm.ConfEnv, conf)
		clearTokenEnv(t)
	}
	tk.PINFile = filepath.Join(tk.Dir, "pin")
	if err := os.WriteFile(tk.PINFile, []byte(tk.PIN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tk.RSA = KeyRef{Label: "rsa", ID: []byte{0x01}}
	tk.EC = KeyRef{Label: "ec", ID: []byte{0x02}}
	shape := copyShape(t, o)
	if made := madeToken(shape); made != nil {
		if err := made.copyTo(tk.Dir); err != nil {
			t.Fatalf("copy the test token: %v", err)
		}
		tk.Serial, tk.RSA.Cert, tk.EC.Cert = made.serial, made.rsa, made.ec
		return tk
	}
	generate := func() error {
		if tk.Serial, err = softhsm.InitToken(tk.Module, tk.Label, tk.SOPIN, tk.PIN); err != nil {
			return fmt.Errorf("initialize SoftHSM token: %w", err)
		}
		specs := append([]softhsm.KeySpec{
			{Type: softhsm.RSA2048, Label: tk.RSA.Label, ID: tk.RSA.ID, CommonName: "signagent test RSA"},
			{Type: softhsm.P256, Label: tk.EC.Label, ID: tk.EC.ID, CommonName: "signagent test P-256"},
		}, o.Extra...)
		certs, err := softhsm.GenerateKeys(tk.Module, tk.Label, tk.PIN, specs)
		if err != nil {
			return fmt.Errorf("generate keys on the SoftHSM token: %w", err)
		}
		tk.RSA.Cert, tk.EC.Cert = certs[0], certs[1]
		if err := keepToken(shape, tk); err != nil {
			return fmt.Errorf("keep the test token for copies: %w", err)
		}
		return nil
	}
	if o.ForProcesses {
		// SoftHSM in this process reads SOFTHSM2_CONF when it is
		// initialized: one token is made at a time with it set. Other
		// tests' processes may inherit it meanwhile; each names its own
		// token after (tk.Env: the last value wins).
		err = withConf(conf, generate)
	} else {
		err = generate()
	}
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// makingInProcess serializes the tokens made for processes (ForProcesses).
var makingInProcess sync.Mutex

// Env is what a process started by the test needs to find this token and
// only it: the SoftHSM configuration, and the module, PIN and token
// variables of the caller's environment emptied.
func (tk *Token) Env() []string {
	env := []string{softhsm.ConfEnv + "=" + tk.Conf}
	for _, v := range tokenEnv {
		env = append(env, v+"=")
	}
	return env
}

// tokenEnv are the variables that would choose another module, token or PIN.
var tokenEnv = []string{pkcs11.ModuleEnv, pkcs11.PINEnv, pkcs11.PINFileEnv, "SIGNAGENT_TOKEN_LABEL"}

// clearTokenEnv keeps the caller's environment from choosing another
// module, token or PIN.
func clearTokenEnv(t testing.TB) {
	for _, v := range tokenEnv {
		t.Setenv(v, "")
	}
}

// Selection returns a selection of the key labelled keyLabel on this token,
// with the PIN read from the token's PIN file.
func (tk *Token) Selection(keyLabel string) pkcs11.Selection {
	return pkcs11.Selection{
		Module:   tk.Module,
		Token:    tokeninfo.TokenSelector{Label: tk.Label},
		KeyLabel: keyLabel,
		PIN:      pkcs11.PINSource{File: tk.PINFile},
	}
}

// Open opens the key labelled keyLabel and closes it when the test ends.
func (tk *Token) Open(t testing.TB, keyLabel string) *pkcs11.Key {
	t.Helper()
	return openSel(t, tk.Selection(keyLabel))
}

func openSel(t testing.TB, sel pkcs11.Selection) *pkcs11.Key {
	t.Helper()
	k, err := pkcs11.Open(context.Background(), sel, zerolog.Nop())
	if err != nil {
		t.Fatalf("open key %q: %v", sel.KeyLabel, err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// Kinds lists the token implementations tests run on: SoftHSM and a TPM.
var Kinds = []struct {
	Name string
	New  func(testing.TB) *Token
}{{"softhsm", New}, {"tpm2", NewTPM}}

// Each runs f as a subtest on a fresh token of each kind.
func Each(t *testing.T, f func(t *testing.T, tk *Token)) {
	for _, k := range Kinds {
		t.Run(k.Name, func(t *testing.T) { f(t, k.New(t)) })
	}
}

// Remove takes the token away as far as SoftHSM can be made to show it: its
// token directory is moved aside. SoftHSM then answers signatures with
// CKR_OBJECT_HANDLE_INVALID, finds no objects, fails C_GetTokenInfo and
// C_Initialize, and sees the token again only after C_Finalize and
// C_Initialize once the directory is back (Insert).
func (tk *Token) Remove(t testing.TB) {
	t.Helper()
	if err := os.Rename(filepath.Join(tk.Dir, "tokens"), filepath.Join(tk.Dir, "tokens.away")); err != nil {
		t.Fatal(err)
	}
}

// Insert puts back a token taken away by Remove.
func (tk *Token) Insert(t testing.TB) {
	t.Helper()
	if err := os.Rename(filepath.Join(tk.Dir, "tokens.away"), filepath.Join(tk.Dir, "tokens")); err != nil {
		t.Fatal(err)
	}
}
