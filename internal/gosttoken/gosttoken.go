// Package gosttoken builds and provisions gosttoken.c, a PKCS#11 module for
// tests and development only: it offers GOST R 34.10-2012 keys, which no
// software token implements, by signing with GnuTLS over a key file in the
// token's directory. signagent never loads it unless told to (dev-token
// --key-type gost2012-256|gost2012-512 prints the lines that do).
package gosttoken

import (
	"bytes"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/signagent/signagent/safefile"
)

//go:embed module/gosttoken.c
var source []byte

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

// Files are what Make writes in the directory.
var Files = []string{Library, "key.pem", "cert.pem", "pin", "tries", "label", "faults", "cert.tmpl"}

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
	if pin == "" {
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		pin = hex.EncodeToString(b)
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
	label := t.Label
	if label == "" {
		label = "signagent-dev"
	}
	if err := safefile.Write(filepath.Join(t.Dir, "label"), []byte(label+"\n"), 0o644); err != nil {
		return "", err
	}
	if err := Build(t.Dir, t.Module(), o); err != nil {
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
// against GnuTLS and p11-kit's PKCS#11 headers.
func Build(dir, out string, o Options) error {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return errors.New("gcc not found: the GOST test token is built from source (install gcc and libgnutls28-dev)")
	}
	src, err := os.CreateTemp("", "gosttoken-*.c")
	if err != nil {
		return err
	}
	defer os.Remove(src.Name())
	if _, err := src.Write(source); err != nil {
		src.Close()
		return err
	}
	src.Close()
	flags := []string{"-I/usr/include/p11-kit-1"}
	libs := []string{"-lgnutls"}
	if pc, err := exec.LookPath("pkg-config"); err == nil {
		if b, err := exec.Command(pc, "--cflags", "gnutls", "p11-kit-1").Output(); err == nil {
			flags = strings.Fields(string(b))
		}
		if b, err := exec.Command(pc, "--libs", "gnutls").Output(); err == nil {
			libs = strings.Fields(string(b))
		}
	}
	args := append([]string{"-shared", "-fPIC", "-O2", "-Wno-deprecated-non-prototype",
		"-DTOKEN_DIR=" + strconv.Quote(dir)}, flags...)
	if o.RawOnly {
		args = append(args, "-DRAW_ONLY")
	}
	if o.MaxTries > 0 {
		args = append(args, fmt.Sprintf("-DMAX_TRIES=%d", o.MaxTries))
	}
	tmp := out + ".tmp"
	args = append(args, "-o", tmp, src.Name())
	args = append(args, libs...)
	args = append(args, "-lpthread")
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		os.Remove(tmp)
		hint := ""
		if bytes.Contains(b, []byte("gnutls/")) || bytes.Contains(b, []byte("p11-kit/")) {
			hint = " (install libgnutls28-dev)"
		}
		return fmt.Errorf("could not build the GOST test module%s: %v: %s", hint, err, lastLine(b))
	}
	return os.Rename(tmp, out)
}

// SetFaults makes the token misbehave as a test asks: the words of
// gosttoken.c's header (short-signature, digest-fail, no-sign-mechanisms,
// paramset=OID, delay=MS); none restores it.
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
