package pkcs11

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/signagent/signagent/pkcs11/locate"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
	"github.com/signagent/signagent/pkcs11/uri"
)

// Complete merges the selection's pkcs11: URI into its fields (token,
// slot, key, module by path or by p11-kit name, PIN source), and checks
// that no value of the URI contradicts one given otherwise: a flag, or
// $SIGNAGENT_PKCS11_MODULE for the module. It is the one place a
// selection is completed, and it runs before the PIN is resolved (the
// URI's pin-source is a PIN source, after --pin-file and before the
// environment) and before the module is loaded. Completing twice changes
// nothing.
func (s Selection) Complete() (Selection, error) {
	if s.completed {
		return s, nil
	}
	s.completed = true
	if s.URI == "" {
		return s, nil
	}
	u, err := uri.Parse(s.URI)
	if err != nil {
		return s, err
	}
	s.ignored = u.Ignored
	set := func(dst *string, v, what string) error {
		if v == "" {
			return nil
		}
		if *dst != "" && *dst != v {
			return fmt.Errorf("%w: %s is given both by a flag (%q) and by the URI (%q)", tokenerr.ErrBadSelection, what, *dst, v)
		}
		*dst = v
		return nil
	}
	if err := errors.Join(
		set(&s.Token.Label, u.Token, "the token label"),
		set(&s.Token.Serial, u.Serial, "the token serial"),
		set(&s.KeyLabel, u.Object, "the key label"),
		set(&s.PIN.File, u.PINSource, "the PIN file"),
		s.mergeModule(u),
	); err != nil {
		return s, err
	}
	if u.HasSlot {
		s.Token.Slot, s.Token.HasSlot = u.SlotID, true
	}
	if len(u.ID) > 0 {
		if len(s.KeyID) > 0 && !bytes.Equal(s.KeyID, u.ID) {
			return s, fmt.Errorf("%w: the key id is given both by a flag and by the URI", tokenerr.ErrBadSelection)
		}
		s.KeyID = u.ID
	}
	return s, nil
}

// mergeModule takes the URI's module-path or module-name (through
// p11-kit's configuration), refusing one that contradicts the other,
// --module or $SIGNAGENT_PKCS11_MODULE.
func (s *Selection) mergeModule(u *uri.URI) error {
	path, what := u.ModulePath, "module-path="+u.ModulePath
	if u.ModuleName != "" {
		byName, err := locate.ModuleByName(u.ModuleName, s.ModuleConfigDirs)
		if err != nil {
			return err
		}
		if path != "" && !sameFile(path, byName) {
			return fmt.Errorf("%w: the URI's module-path (%s) and module-name=%s (%s) are different modules", tokenerr.ErrBadSelection, path, u.ModuleName, byName)
		}
		path, what = byName, "module-name="+u.ModuleName+" ("+byName+")"
	}
	if path == "" {
		return nil
	}
	other, from := s.Module, "--module"
	if other == "" {
		other, from = os.Getenv(ModuleEnv), "$"+ModuleEnv
	}
	if other != "" && !sameFile(other, path) {
		return fmt.Errorf("%w: the module is %s by %s but the URI's %s; give one", tokenerr.ErrBadSelection, other, from, what)
	}
	s.Module, s.ModuleSource = path, "pkcs11 URI"
	return nil
}

// sameFile says whether a and b name the same file (symbolic links
// followed), or the same path when either cannot be resolved.
func sameFile(a, b string) bool {
	ra, erra := filepath.EvalSymlinks(a)
	rb, errb := filepath.EvalSymlinks(b)
	if erra != nil || errb != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return ra == rb
}

// Ignored lists the vendor attributes (x-...) of the selection's URI,
// which signagent does not know and ignores, as RFC 7512 allows; set by
// Complete.
func (s Selection) Ignored() []string { return s.ignored }

// DefaultTimeout bounds Open and each token operation when the selection
// names no timeout.
const DefaultTimeout = 30 * time.Second

// Selection names the module, token, key and certificate to use, and where
// the PIN comes from. Fields left empty are filled from URI, then defaulted.
type Selection struct {
	Module       string // module path (flag)
	ModuleSource string // how Module was given, for the log ("flag")
	Token        tokeninfo.TokenSelector
	KeyLabel     string
	KeyID        []byte
	URI          string // an RFC 7512 pkcs11: URI
	CertFile     string // PEM or DER certificate, instead of the token's
	PIN          PINSource
	// MaxSessions bounds the sessions opened to the token (default 8).
	MaxSessions int
	// Timeout bounds each token operation of the key once open (default
	// DefaultTimeout). Open itself is bounded by its context.
	Timeout time.Duration
	// AllowFinalTry lets a login go ahead when the token says one more
	// wrong PIN locks it.
	AllowFinalTry bool
	// Registry holds the loaded modules (default: this process's).
	Registry *Registry
	// NoCertificate opens the key without looking for its certificate
	// (provisioning, before the certificate exists).
	NoCertificate bool
	// ModuleConfigDirs are p11-kit's module configuration directories for
	// a URI's module-name (nil: locate.DefaultModuleConfigDirs).
	ModuleConfigDirs []string
	// Expect, when set, is the token and key opened before (Key.Identity):
	// only that token is logged in to, and only that key used; anything
	// else is ErrOtherToken (identity.go). The agent sets it when it
	// opens its key again.
	Expect *Identity

	completed bool     // Complete ran
	ignored   []string // vendor attributes of the URI, ignored
}

// ParseKeyID decodes a hex key id, allowing colons between bytes.
func ParseKeyID(s string) ([]byte, error) {
	b, err := hex.DecodeString(strings.ReplaceAll(s, ":", ""))
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("%w: key id %q is not hex", tokenerr.ErrBadSelection, s)
	}
	return b, nil
}
