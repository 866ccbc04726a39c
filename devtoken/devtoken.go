// Package devtoken makes the development token that "signagent token dev"
// sets up for the demo and development: a SoftHSM token with an RSA or
// P-256 key and its self-signed certificate (provisioned by pkcs11/softhsm),
// or for the GOST kinds the GOST test module built for its directory
// (pkcs11/gosttoken), in a directory it marks as its own, and the shell
// lines that point signagent at it.
package devtoken

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gosttoken"
	"github.com/signagent/signagent/pkcs11/softhsm"
	"github.com/signagent/signagent/safefile"
)

// Marker marks a directory a Token was made in; Make removes files only in
// a directory that has it.
const Marker = ".signagent-dev-token"

// devFiles are what a Token makes in its directory (a SoftHSM token, or
// the GOST test module's).
var devFiles = append([]string{"tokens", "softhsm2.conf", "so-pin", "kind"}, gosttoken.Files...)

// Kinds of development token: the key the token holds.
const (
	KindRSA     = "rsa2048"
	KindEC      = "ec-p256"
	KindGOST256 = "gost2012-256"
	KindGOST512 = "gost2012-512"
)

// Kinds lists the kinds, the default first.
var Kinds = []string{KindRSA, KindEC, KindGOST256, KindGOST512}

func gostBits(kind string) int {
	switch kind {
	case KindGOST256:
		return 256
	case KindGOST512:
		return 512
	}
	return 0
}

// ErrForeignDir is returned for a non-empty directory no Token was made in.
var ErrForeignDir = errors.New("not empty and was not made by dev-token")

// ErrOtherKind is returned when the directory holds a token of another kind.
var ErrOtherKind = errors.New("holds a development token of another kind")

// Token is a development token: a SoftHSM configuration, a token with an
// RSA-2048 key (and a P-256 one with EC) or a P-256 key (Kind ec-p256) and
// a self-signed certificate, and its random PIN in Dir/pin (0600). For the
// GOST kinds it is the GOST test module (pkcs11/gosttoken) built for Dir:
// no software token implements GOST.
type Token struct {
	Dir, Label, Module string
	Kind               string // one of Kinds; empty is rsa2048
	EC                 bool
	// Force makes a new token even when one is there, and replaces the
	// files of the same names in a directory no Token was made in.
	Force bool
	Log   zerolog.Logger
}

// Conf is the SoftHSM configuration of the token.
func (d Token) Conf() string { return filepath.Join(d.Dir, "softhsm2.conf") }

// PINFile is the file holding the dev token's user PIN (mode 0600).
func (d Token) PINFile() string { return filepath.Join(d.Dir, "pin") }

func (d Token) kind() string {
	if d.Kind == "" {
		return KindRSA
	}
	return d.Kind
}

func (d Token) gost() gosttoken.Token {
	return gosttoken.Token{Dir: d.Dir, Bits: gostBits(d.kind()), Label: d.Label}
}

// ModulePath is the PKCS#11 module that serves the token: SoftHSM's, or the
// GOST test module in Dir.
func (d Token) ModulePath() string {
	if gostBits(d.kind()) != 0 {
		return d.gost().Module()
	}
	return d.Module
}

// existingKind is the kind of the token an earlier run made in Dir
// (rsa2048 for a token made before kinds were recorded).
func (d Token) existingKind() string {
	b, err := os.ReadFile(filepath.Join(d.Dir, "kind"))
	if err != nil {
		return KindRSA
	}
	return strings.TrimSpace(string(b))
}

// Make makes the token, or reuses the complete one an earlier run made
// (reused is then true).
func (d Token) Make() (reused bool, err error) {
	if strings.ContainsFunc(d.Dir, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return false, fmt.Errorf("%s: a path with a newline or other control character cannot be used (SoftHSM's configuration cannot hold it)", strconv.Quote(d.Dir))
	}
	if reuse, err := d.claim(); err != nil || reuse {
		return reuse, err
	}
	return false, d.make()
}

// claim decides what to do with the directory: reuse the token in it (it
// is ours and complete, and no Force), or make one, after removing what an
// earlier run of ours left. A directory that is not ours and not empty is
// refused unless Force, and then what will be replaced is logged first.
func (d Token) claim() (reuse bool, err error) {
	entries, err := os.ReadDir(d.Dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return false, d.writeMarker()
	}
	if err != nil {
		return false, fmt.Errorf("could not read %s: %w", d.Dir, err)
	}
	_, merr := os.Lstat(filepath.Join(d.Dir, Marker))
	ours := merr == nil
	if !ours && !d.Force {
		return false, fmt.Errorf("%s is %w; choose another --dir, or give --force to replace its %s", d.Dir, ErrForeignDir, strings.Join(devFiles, ", "))
	}
	if _, err := os.Stat(d.PINFile()); ours && err == nil && !d.Force {
		if k := d.existingKind(); k != d.kind() {
			return false, fmt.Errorf("%s %w (%s, not %s); give --force to replace it, or another --dir", d.Dir, ErrOtherKind, k, d.kind())
		}
		return true, nil
	}
	var gone []string
	for _, f := range devFiles {
		if _, err := os.Lstat(filepath.Join(d.Dir, f)); err == nil {
			gone = append(gone, f)
		}
	}
	if len(gone) > 0 {
		d.Log.Warn().Str("dir", d.Dir).Strs("removing", gone).Msg("replacing the development token's files")
		for _, f := range gone {
			if err := os.RemoveAll(filepath.Join(d.Dir, f)); err != nil {
				return false, err
			}
		}
	}
	return false, d.writeMarker()
}

func (d Token) writeMarker() error {
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		return fmt.Errorf("could not create %s: %w", d.Dir, err)
	}
	return os.WriteFile(filepath.Join(d.Dir, Marker), []byte("made by signagent token dev; it removes only its own files here\n"), 0o600)
}

// make makes the token in the claimed directory; if making it fails, what
// was made is removed, so that the next run starts clean.
func (d Token) make() (err error) {
	defer func() {
		if err != nil {
			for _, f := range devFiles {
				os.RemoveAll(filepath.Join(d.Dir, f))
			}
		}
	}()
	if err := safefile.Write(filepath.Join(d.Dir, "kind"), []byte(d.kind()+"\n"), 0o644); err != nil {
		return err
	}
	if bits := gostBits(d.kind()); bits != 0 {
		d.Log.Info().Str("dir", d.Dir).Int("bits", bits).Msg("making a GOST R 34.10-2012 key with certtool and building the GOST test module with gcc")
		_, err := d.gost().Make("", gosttoken.Options{})
		return err
	}
	conf, err := softhsm.WriteConfig(d.Dir)
	if err != nil {
		return err
	}
	// SoftHSM reads its configuration when the module is initialized.
	os.Setenv(softhsm.ConfEnv, conf)
	pin, err := randomPIN(16)
	if err != nil {
		return err
	}
	soPIN, err := randomPIN(16)
	if err != nil {
		return err
	}
	d.Log.Info().Str("dir", d.Dir).Str("token", d.Label).Msg("initializing SoftHSM token")
	if _, err := softhsm.InitToken(d.Module, d.Label, soPIN, pin); err != nil {
		return err
	}
	specs := []softhsm.KeySpec{{Type: softhsm.RSA2048, Label: d.Label, ID: []byte{1}, CommonName: "signagent development key"}}
	if d.kind() == KindEC {
		specs[0] = softhsm.KeySpec{Type: softhsm.P256, Label: d.Label, ID: []byte{1}, CommonName: "signagent development key (P-256)"}
	}
	d.Log.Info().Str("key", d.Label).Str("type", d.kind()).Msg("generating the key on the token")
	if d.EC {
		d.Log.Info().Str("key", d.Label+"-ec").Msg("generating P-256 key on the token")
		specs = append(specs, softhsm.KeySpec{Type: softhsm.P256, Label: d.Label + "-ec", ID: []byte{2}, CommonName: "signagent development key (P-256)"})
	}
	certs, err := softhsm.GenerateKeys(d.Module, d.Label, pin, specs)
	if err != nil {
		return err
	}
	// The certificate, public, for the emulator to trust and for verify --ca.
	if err := safefile.Write(filepath.Join(d.Dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certs[0].Raw}), 0o644); err != nil {
		return err
	}
	if err := safefile.Write(filepath.Join(d.Dir, "so-pin"), []byte(soPIN+"\n"), 0o600); err != nil {
		return err
	}
	// The PIN file is written last: its presence means the token is complete.
	return safefile.Write(d.PINFile(), []byte(pin+"\n"), 0o600)
}

// WriteEnv prints the shell lines that point signagent at the token. Every
// line is safe for eval: the comment holds no newline (strconv.Quote), the
// values are single-quoted where needed.
func (d Token) WriteEnv(w io.Writer, reused bool) error {
	what := "made"
	if reused {
		what = "reused"
	}
	fmt.Fprintf(w, "# signagent development token %s (%s) %s in %s\n", strconv.Quote(d.Label), d.kind(), what, strconv.Quote(d.Dir))
	vars := [][2]string{
		{softhsm.ConfEnv, d.Conf()},
		{pkcs11.ModuleEnv, d.ModulePath()},
		{"SIGNAGENT_TOKEN_LABEL", d.Label},
		{"SIGNAGENT_KEY_LABEL", d.Label},
		{pkcs11.PINFileEnv, d.PINFile()},
	}
	if gostBits(d.kind()) != 0 {
		// The GOST test module, a software stand-in for a card: for tests
		// and development only (its key is a file in the directory).
		fmt.Fprintf(w, "# GOST test module (software, for development only): %s\n", strconv.Quote(d.ModulePath()))
		vars = vars[1:]
	}
	for _, kv := range vars {
		if _, err := fmt.Fprintf(w, "export %s=%s\n", kv[0], shellQuote(kv[1])); err != nil {
			return err
		}
	}
	return nil
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// randomPIN returns a random PIN of n hex digits.
func randomPIN(n int) (string, error) {
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b)[:n], nil
}
