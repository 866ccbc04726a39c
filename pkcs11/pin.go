package pkcs11

import (
	"errors"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/pkcs11/pinfile"
	"github.com/signagent/signagent/pkcs11/tokenerr"
)

// PINEnv and PINFileEnv name the variables a command-line tool reads the
// PIN from (see internal/secret); this package reads no variable.
const (
	PINEnv     = secret.PINEnv
	PINFileEnv = secret.PINFileEnv
)

// PINSource says where to get the PIN from. There is deliberately no way to
// pass the PIN itself on the command line, and this package reads neither
// the environment nor a configuration file: the caller decides the
// sources and their order in Lookup (internal/secret.Source: the file a
// flag or the URI's pin-source names, the environment, the configuration
// file, a prompt).
type PINSource struct {
	// File is a PIN file named by a flag or by the selection's URI
	// (pin-source=, merged by Selection.Complete).
	File string
	// Lookup, when set, resolves the PIN given File, with pinfile.Secret's
	// limits (its Max and Parse); without it File is read, or the PIN is
	// missing.
	Lookup func(file string) (secret.Secret, error)
	// Value is a PIN the program already holds (provisioning a token it
	// just made); it is never set from user input on a command line.
	Value string
	// PadWhenMissing lets a reader's keypad stand in for a PIN nobody
	// gave (a command that would otherwise prompt): on a token with a
	// protected authentication path (CKF_PROTECTED_AUTHENTICATION_PATH),
	// ResolveFor leaves the PIN out and the user types it on the reader.
	PadWhenMissing bool

	pin, from string // set by Resolve
	pad       bool   // set by ResolveFor: log in on the keypad
}

// Resolve reads the PIN now and returns a source that holds it, so that a
// prompt is answered before a token deadline starts. It says where the PIN
// came from in From.
func (src PINSource) Resolve() (PINSource, error) {
	if src.pin != "" {
		return src, nil
	}
	if src.Value != "" {
		src.pin, src.from = src.Value, "the program"
		return src, nil
	}
	var got secret.Secret
	var err error
	switch {
	case src.Lookup != nil:
		got, err = src.Lookup(src.File)
	case src.File != "":
		got, err = pinfile.Secret(src.File).Resolve()
	default:
		err = errors.New("no PIN: name a PIN file")
	}
	if err != nil {
		return src, errdefs.Mark(err, tokenerr.ErrPINMissing)
	}
	src.pin, src.from = got.Value, got.From
	return src, nil
}

// From says where a resolved PIN came from ("the file /x (--pin-file)",
// "$SIGNAGENT_PIN").
func (src PINSource) From() string { return src.from }

// Missing says that no PIN was given nor resolved, nor the keypad chosen.
func (src PINSource) Missing() bool {
	return !src.pad && src.File == "" && src.Value == "" && src.pin == ""
}

// OnPad is the source of a PIN the user types on the reader's keypad.
func (src PINSource) OnPad() PINSource { src.pad, src.from = true, "the reader's keypad"; return src }

// Pad says whether the PIN is typed on the reader's keypad (OnPad).
func (src PINSource) Pad() bool { return src.pad }

// ReadPIN returns the PIN from its source.
func ReadPIN(src PINSource) (string, error) {
	src, err := src.Resolve()
	return src.pin, err
}
