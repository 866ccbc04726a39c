package softhsm

import (
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
	"github.com/signagent/signagent/safefile"
)

// DevMarker marks a directory DevToken made; it removes files only in a
// directory that has it.
const DevMarker = ".signagent-dev-token"

// devFiles are what DevToken makes in its directory.
var devFiles = []string{"tokens", "softhsm2.conf", "pin", "so-pin", "cert.pem"}

// ErrForeignDir is returned for a non-empty directory DevToken did not make.
var ErrForeignDir = errors.New("not empty and was not made by dev-token")

// DevToken is a development token: a SoftHSM configuration, a token with an
// RSA-2048 key (and a P-256 one with EC) and a self-signed certificate,
// and its random PIN in Dir/pin (0600).
type DevToken struct {
	Dir, Label, Module string
	EC                 bool
	// Force makes a new token even when one is there, and replaces the
	// files of the same names in a directory DevToken did not make.
	Force bool
	Log   zerolog.Logger
}

// Conf and PINFile are the token's configuration and PIN file.
func (d DevToken) Conf() string    { return filepath.Join(d.Dir, "softhsm2.conf") }
func (d DevToken) PINFile() string { return filepath.Join(d.Dir, "pin") }

// Make makes the token, or reuses the complete one an earlier run made
// (reused is then true).
func (d DevToken) Make() (reused bool, err error) {
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
func (d DevToken) claim() (reuse bool, err error) {
	entries, err := os.ReadDir(d.Dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return false, d.writeMarker()
	}
	if err != nil {
		return false, fmt.Errorf("could not read %s: %w", d.Dir, err)
	}
	_, merr := os.Lstat(filepath.Join(d.Dir, DevMarker))
	ours := merr == nil
	if !ours && !d.Force {
		return false, fmt.Errorf("%s is %w; choose another --dir, or give --force to replace its %s", d.Dir, ErrForeignDir, strings.Join(devFiles, ", "))
	}
	if _, err := os.Stat(d.PINFile()); ours && err == nil && !d.Force {
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

func (d DevToken) writeMarker() error {
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		return fmt.Errorf("could not create %s: %w", d.Dir, err)
	}
	return os.WriteFile(filepath.Join(d.Dir, DevMarker), []byte("made by signagent dev-token; it removes only its own files here\n"), 0o600)
}

// make makes the token in the claimed directory; if making it fails, what
// was made is removed, so that the next run starts clean.
func (d DevToken) make() (err error) {
	defer func() {
		if err != nil {
			for _, f := range devFiles {
				os.RemoveAll(filepath.Join(d.Dir, f))
			}
		}
	}()
	conf, err := WriteConfig(d.Dir)
	if err != nil {
		return err
	}
	// SoftHSM reads its configuration when the module is initialized.
	os.Setenv(ConfEnv, conf)
	pin, err := RandomPIN(16)
	if err != nil {
		return err
	}
	soPIN, err := RandomPIN(16)
	if err != nil {
		return err
	}
	d.Log.Info().Str("dir", d.Dir).Str("token", d.Label).Msg("initializing SoftHSM token")
	if _, err := InitToken(d.Module, d.Label, soPIN, pin); err != nil {
		return err
	}
	d.Log.Info().Str("key", d.Label).Msg("generating RSA-2048 key on the token")
	specs := []KeySpec{{Type: RSA2048, Label: d.Label, ID: []byte{1}, CommonName: "signagent development key"}}
	if d.EC {
		d.Log.Info().Str("key", d.Label+"-ec").Msg("generating P-256 key on the token")
		specs = append(specs, KeySpec{Type: P256, Label: d.Label + "-ec", ID: []byte{2}, CommonName: "signagent development key (P-256)"})
	}
	certs, err := GenerateKeys(d.Module, d.Label, pin, specs)
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
func (d DevToken) WriteEnv(w io.Writer, reused bool) error {
	what := "made"
	if reused {
		what = "reused"
	}
	fmt.Fprintf(w, "# signagent development token %s %s in %s\n", strconv.Quote(d.Label), what, strconv.Quote(d.Dir))
	for _, kv := range [][2]string{
		{ConfEnv, d.Conf()},
		{pkcs11.ModuleEnv, d.Module},
		{"SIGNAGENT_TOKEN_LABEL", d.Label},
		{"SIGNAGENT_KEY_LABEL", d.Label},
		{pkcs11.PINFileEnv, d.PINFile()},
	} {
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
