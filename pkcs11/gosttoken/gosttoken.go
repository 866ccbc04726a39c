// Package gosttoken builds and provisions gosttoken.c, a PKCS#11 module for
// tests and development only: it offers GOST R 34.10-2012 keys, which no
// software token implements, by signing with GnuTLS over a key file in the
// token's directory, and decrypts a GOST key transport (key agreement,
// unwrap and GOST 28147-89 decryption, in gostkeyx.c over libgcrypt) into
// session keys as real GOST tokens do. signagent never loads it unless told
// to (dev-token --key-type gost2012-256|gost2012-512 prints the lines that
// do).
package gosttoken

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/signagent/signagent/safefile"
)

//go:embed module/gosttoken.c
var source []byte

//go:embed module/gostkeyx.c
var keyxSource []byte

//go:embed module/gostparams.h
var paramsHeader []byte

// Library is the module's file name in the token's directory.
const Library = "libgosttoken.so"

// Options shape a build of the module.
type Options struct {
	// RawOnly leaves out the hashing signature mechanisms
	// (CKM_GOSTR3410_WITH_GOSTR3411_12_*): the caller must hash on the
	// token with C_Digest and sign the hash with CKM_GOSTR3410(_512).
	RawOnly bool
	// MaxTries is the number of wrong PINs after which the PIN locks (3).
	MaxTries int
	// OneStepUnwrap offers CKM_GOSTR3410_KEY_WRAP (C_UnwrapKey with the
	// private key of a whole GostR3410-KeyTransport) in place of
	// CKM_GOSTR3410_12_DERIVE, CKM_KDF_4357 and CKM_GOST28147_KEY_WRAP: a
	// token that has only the one-step way of opening a key transport.
	OneStepUnwrap bool
	// Cached builds the module once per set of options (and source) into
	// the user's cache directory, without a directory compiled in (it then
	// reads the token of the directory its own file is in), and copies it
	// into each token: tests make many tokens. dev-token builds its own.
	Cached bool
}

// Token is a GOST test token: a directory with the key, its certificate,
// the PIN, and the module built for that directory.
type Token struct {
	Dir   string
	Bits  int // 256 or 512
	Label string
}

// Module is the path of the token's module.
func (t Token) Module() string { return filepath.Join(t.Dir, Library) }

// PINFile holds the token's user PIN (0600).
func (t Token) PINFile() string { return filepath.Join(t.Dir, "pin") }

// CertFile is the token's certificate (PEM, public).
func (t Token) CertFile() string { return filepath.Join(t.Dir, "cert.pem") }

// KeyFile is the private key the module signs with (0600): test material.
func (t Token) KeyFile() string { return filepath.Join(t.Dir, "key.pem") }

// ObjectsFile is where the module writes how many session keys are alive,
// after each one made or destroyed (a test aid: every path must destroy
// what it made).
func (t Token) ObjectsFile() string { return filepath.Join(t.Dir, "objects") }

// Files are what Make writes in the directory.
var Files = []string{Library, "key.pem", "cert.pem", "pin", "tries", "label", "faults", "cert.tmpl", "objects"}

// Make generates a key and a self-signed certificate with certtool, writes
// the PIN (random when pin is empty) and the label, and builds the module.
// It returns the PIN.
func (t Token) Make(pin string, o Options) (string, error) {
	if t.Bits != 256 && t.Bits != 512 {
		return "", fmt.Errorf("a GOST key is 256 or 512 bits, not %d", t.Bits)
	}
	certtool, err := exec.LookPath("certtool")
	if err != nil {
		return "", errors.New("certtool not found: the GOST test token's key is made by GnuTLS's certtool (install gnutls-bin)")
	}
	if err := os.MkdirAll(t.Dir, 0o700); err != nil {
		return "", err
	}
	kind := fmt.Sprintf("gost12-%d", t.Bits)
	if out, err := exec.Command(certtool, "--generate-privkey", "--key-type", kind, "--outfile", t.KeyFile()).CombinedOutput(); err != nil {
		return "", fmt.Errorf("certtool could not make the key: %v: %s", err, lastLine(out))
	}
	if err := os.Chmod(t.KeyFile(), 0o600); err != nil {
		return "", err
	}
	if err := t.Certify(t.KeyFile(), t.CertFile()); err != nil {
		return "", err
	}
	return t.finish(pin, o)
}

// MakeWithKey provisions the token with a given key and certificate (PEM;
// the key GnuTLS reads: certtool's or OpenSSL's genpkey -algorithm
// gost2012_256|gost2012_512 PKCS#8) instead of fresh ones, so tests can
// keep fixtures for a fixed key. The key must be of t.Bits and be the
// certificate's. It returns the PIN.
func (t Token) MakeWithKey(pin, keyPEMFile, certPEMFile string, o Options) (string, error) {
	if t.Bits != 256 && t.Bits != 512 {
		return "", fmt.Errorf("a GOST key is 256 or 512 bits, not %d", t.Bits)
	}
	if _, err := exec.LookPath("certtool"); err != nil {
		return "", errors.New("certtool not found: the GOST test token checks its key with GnuTLS's certtool (install gnutls-bin)")
	}
	keyPEM, err := os.ReadFile(keyPEMFile)
	if err != nil {
		return "", err
	}
	certPEM, err := os.ReadFile(certPEMFile)
	if err != nil {
		return "", err
	}
	if err := checkKeyPair(keyPEMFile, certPEMFile, t.Bits); err != nil {
		return "", err
	}
	if err := os.MkdirAll(t.Dir, 0o700); err != nil {
		return "", err
	}
	if err := safefile.Write(t.KeyFile(), keyPEM, 0o600); err != nil {
		return "", err
	}
	if err := safefile.Write(t.CertFile(), certPEM, 0o644); err != nil {
		return "", err
	}
	return t.finish(pin, o)
}

// checkKeyPair asks certtool whether GnuTLS reads the key as a GOST key of
// bits and whether the certificate is that key's.
func checkKeyPair(keyFile, certFile string, bits int) error {
	key, err := exec.Command("certtool", "--key-info", "--infile", keyFile).CombinedOutput()
	if err != nil {
		return fmt.Errorf("GnuTLS cannot read the key %s: %s", keyFile, lastLine(key))
	}
	if !bytes.Contains(key, []byte(fmt.Sprintf("GOST R 34.10-2012-%d", bits))) {
		return fmt.Errorf("the key %s is not a GOST R 34.10-2012 %d-bit key", keyFile, bits)
	}
	cert, err := exec.Command("certtool", "--certificate-info", "--infile", certFile).CombinedOutput()
	if err != nil {
		return fmt.Errorf("GnuTLS cannot read the certificate %s: %s", certFile, lastLine(cert))
	}
	id := keyID(key)
	if id == "" || id != keyID(cert) {
		return fmt.Errorf("the certificate %s is not the key %s's", certFile, keyFile)
	}
	return nil
}

// keyID is the SHA-256 public key ID in certtool's key or certificate info.
func keyID(info []byte) string {
	lines := strings.Split(string(info), "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) == "Public Key ID:" && i+2 < len(lines) {
			for _, m := range lines[i+1 : i+3] {
				if f := strings.TrimSpace(m); strings.HasPrefix(f, "sha256:") {
					return f
				}
			}
		}
	}
	return ""
}

// finish writes the label, builds the module and writes the PIN (random
// when pin is empty).
func (t Token) finish(pin string, o Options) (string, error) {
	if pin == "" {
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		pin = hex.EncodeToString(b)
	}
	label := t.Label
	if label == "" {
		label = "signagent-dev"
	}
	if err := safefile.Write(filepath.Join(t.Dir, "label"), []byte(label+"\n"), 0o644); err != nil {
		return "", err
	}
	build := func() error { return Build(t.Dir, t.Module(), o) }
	if o.Cached {
		build = func() error { return copyCached(t.Module(), o) }
	}
	if err := build(); err != nil {
		return "", err
	}
	// The PIN last: a token with its PIN file is complete.
	return pin, safefile.Write(t.PINFile(), []byte(pin+"\n"), 0o600)
}

// Certify makes a self-signed certificate for the key in keyFile.
func (t Token) Certify(keyFile, certFile string) error {
	tmpl := filepath.Join(t.Dir, "cert.tmpl")
	serial := make([]byte, 8)
	if _, err := rand.Read(serial); err != nil {
		return err
	}
	serial[0] &= 0x7f
	body := fmt.Sprintf("cn = \"signagent development key (GOST R 34.10-2012 %d-bit)\"\nserial = 0x%x\nexpiration_days = 365\nsigning_key\n", t.Bits, serial)
	if err := os.WriteFile(tmpl, []byte(body), 0o600); err != nil {
		return err
	}
	defer os.Remove(tmpl)
	out, err := exec.Command("certtool", "--generate-self-signed", "--load-privkey", keyFile, "--template", tmpl, "--outfile", certFile).CombinedOutput()
	if err != nil {
		return fmt.Errorf("certtool could not make the certificate: %v: %s", err, lastLine(out))
	}
	return os.Chmod(certFile, 0o644)
}

// Build compiles the module for the token in dir into out with gcc,
// against GnuTLS, libgcrypt and p11-kit's PKCS#11 headers.
func Build(dir, out string, o Options) error {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return errors.New("gcc not found: the GOST test token is built from source (install gcc, libgnutls28-dev and libgcrypt20-dev)")
	}
	// gosttoken.c includes gostkeyx.c, which includes gostparams.h, from
	// its own directory.
	src, err := os.MkdirTemp("", "gosttoken-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	main := filepath.Join(src, "gosttoken.c")
	if err := os.WriteFile(main, source, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "gostkeyx.c"), keyxSource, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "gostparams.h"), paramsHeader, 0o600); err != nil {
		return err
	}
	flags := []string{"-I/usr/include/p11-kit-1"}
	libs := []string{"-lgnutls"}
	gcrypt := []string{"-lgcrypt"}
	pc, pcErr := exec.LookPath("pkg-config")
	if pcErr == nil {
		if b, err := exec.Command(pc, "--cflags", "gnutls", "p11-kit-1").Output(); err == nil {
			flags = strings.Fields(string(b))
		}
		if b, err := exec.Command(pc, "--libs", "gnutls").Output(); err == nil {
			libs = strings.Fields(string(b))
		}
	}
	// libgcrypt ships a pkg-config file since 1.9; libgcrypt-config before.
	if b, err := exec.Command(pc, "--cflags", "--libs", "libgcrypt").Output(); pcErr == nil && err == nil {
		gcrypt = strings.Fields(string(b))
	} else if b, err := exec.Command("libgcrypt-config", "--cflags", "--libs").Output(); err == nil {
		gcrypt = strings.Fields(string(b))
	}
	args := append([]string{"-shared", "-fPIC", "-O2", "-Wno-deprecated-non-prototype",
		"-DTOKEN_DIR=" + strconv.Quote(dir)}, flags...)
	if o.RawOnly {
		args = append(args, "-DRAW_ONLY")
	}
	if o.OneStepUnwrap {
		args = append(args, "-DONE_STEP_UNWRAP")
	}
	if o.MaxTries > 0 {
		args = append(args, fmt.Sprintf("-DMAX_TRIES=%d", o.MaxTries))
	}
	tmp := out + ".tmp"
	args = append(args, "-o", tmp, main)
	args = append(args, libs...)
	args = append(args, gcrypt...)
	args = append(args, "-lpthread")
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		os.Remove(tmp)
		hint := ""
		if bytes.Contains(b, []byte("gcrypt")) {
			hint = " (install libgcrypt20-dev)"
		} else if bytes.Contains(b, []byte("gnutls/")) || bytes.Contains(b, []byte("p11-kit/")) {
			hint = " (install libgnutls28-dev)"
		}
		return fmt.Errorf("could not build the GOST test module%s: %v: %s", hint, err, lastLine(b))
	}
	return os.Rename(tmp, out)
}

// SetFaults makes the token misbehave as a test asks: the words of
// gosttoken.c's header; none restores it. Signing: short-signature,
// digest-fail, no-sign-mechanisms, paramset=OID, delay=MS. Looking like a
// GOST card behind OpenSC (gost-card-opensc.md): raw-mechanism-only (only
// CKM_GOSTR3410(_512) listed: no Streebog, no hashing signature, no key
// agreement), no-certificate and no-public-key (those objects hidden).
// Decrypting a key
// transport: no-derive (CKM_GOSTR3410_12_DERIVE not listed and refused),
// no-kdf4357 (CKM_KDF_4357 likewise; the derive's kdf CKD_KDF_4357 still
// works), kdf=NAME[,NAME] (the derive takes only these kdf, of 2012-256 and
// 4357; kdf=none takes none: CKR_MECHANISM_PARAM_INVALID), bad-mac (the
// unwrap's IMIT check fails: CKR_WRAPPED_KEY_INVALID), no-unwrap-mechanism
// (CKM_GOST28147_KEY_WRAP and CKM_GOSTR3410_KEY_WRAP not listed and
// refused), no-decrypt (CKM_GOST28147 likewise), decrypt-fail (C_Decrypt
// answers CKR_DEVICE_ERROR), no-derive-attr (the private key's CKA_DERIVE
// is false: the derive answers CKR_KEY_FUNCTION_NOT_PERMITTED).
func (t Token) SetFaults(words ...string) error {
	p := filepath.Join(t.Dir, "faults")
	if len(words) == 0 {
		err := os.Remove(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	return os.WriteFile(p, []byte(strings.Join(words, "\n")+"\n"), 0o600)
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

var cacheMu sync.Mutex

// copyCached copies the cached build for o to out, building it first when
// the cache has none: keyed by the source and the options, in the user's
// cache directory (as Go's build cache is), written whole or not at all.
func copyCached(out string, o Options) error {
	o.Cached = false
	h := sha256.New()
	h.Write(source)
	h.Write(keyxSource)
	h.Write(paramsHeader)
	fmt.Fprintf(h, "%+v", o)
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "signagent", "gosttoken")
	built := filepath.Join(dir, hex.EncodeToString(h.Sum(nil))[:24]+".so")
	cacheMu.Lock()
	if _, err := os.Stat(built); err != nil {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			cacheMu.Unlock()
			return err
		}
		tmp, err := os.CreateTemp(dir, "build-*.so")
		if err != nil {
			cacheMu.Unlock()
			return err
		}
		tmp.Close()
		err = Build("", tmp.Name(), o)
		if err == nil {
			err = os.Rename(tmp.Name(), built)
		}
		if err != nil {
			os.Remove(tmp.Name())
			cacheMu.Unlock()
			return err
		}
	}
	cacheMu.Unlock()
	b, err := os.ReadFile(built)
	if err != nil {
		return err
	}
	return safefile.Write(out, b, 0o755)
}
