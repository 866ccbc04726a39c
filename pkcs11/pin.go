package pkcs11

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/safefile"
)

// PINEnv is the environment variable that may hold the PIN.
const PINEnv = "SIGNAGENT_PIN"

// PINFileEnv is the environment variable that may name a file holding the PIN.
const PINFileEnv = "SIGNAGENT_PIN_FILE"

// MaxPINFile is the most a PIN file may hold. A PIN is a few to a few dozen
// characters; a larger file is a mistake (or /dev/zero), not a PIN.
const MaxPINFile = 512

// PINSource says where to get the PIN from. There is deliberately no way to
// pass the PIN itself on the command line.
//
// The precedence is flag, then environment, then prompt: a PIN file given
// explicitly (File) beats $SIGNAGENT_PIN, which beats $SIGNAGENT_PIN_FILE,
// which beats a prompt on the terminal.
type PINSource struct {
	File string // a file named by a flag (trailing newline trimmed)
	// ConfigFile is a file named in a configuration file: it comes after
	// the environment.
	ConfigFile string
	Prompt     bool      // ask on the terminal when no other source gives one
	TTY        *os.File  // the terminal to prompt on (default: stdin)
	Out        io.Writer // where the prompt goes (default: stderr)
	// Value is a PIN the program already holds (provisioning a token it
	// just made); it is never set from user input on a command line.
	Value string

	pin, from string // set by Resolve
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
	pin, from, err := src.read()
	if err != nil {
		return src, err
	}
	src.pin, src.from = pin, from
	return src, nil
}

// From says where a resolved PIN came from ("--pin-file /x", "$SIGNAGENT_PIN").
func (src PINSource) From() string { return src.from }

func (src PINSource) read() (pin, from string, err error) {
	if src.File != "" {
		pin, err := ReadPINFile(src.File)
		return pin, "the PIN file " + src.File, err
	}
	if pin, ok := os.LookupEnv(PINEnv); ok && pin != "" {
		if err := checkPIN(pin); err != nil {
			return "", "", fmt.Errorf("%w: $%s %w", ErrPINMissing, PINEnv, err)
		}
		return pin, "$" + PINEnv, nil
	}
	if file := os.Getenv(PINFileEnv); file != "" {
		pin, err := ReadPINFile(file)
		return pin, "the PIN file " + file + " ($" + PINFileEnv + ")", err
	}
	if src.ConfigFile != "" {
		pin, err := ReadPINFile(src.ConfigFile)
		return pin, "the PIN file " + src.ConfigFile + " (configuration)", err
	}
	tty := src.TTY
	if tty == nil {
		tty = os.Stdin
	}
	if src.Prompt && term.IsTerminal(int(tty.Fd())) {
		out := src.Out
		if out == nil {
			out = os.Stderr
		}
		b, err := promptPIN(tty, out)
		if err != nil {
			return "", "", err
		}
		return string(b), "the terminal", nil
	}
	return "", "", fmt.Errorf("%w: give --pin-file, set %s or %s, or run on a terminal to be asked", ErrPINMissing, PINEnv, PINFileEnv)
}

// promptPIN asks for the PIN without echo (see secret.Prompt).
func promptPIN(tty *os.File, out io.Writer) ([]byte, error) {
	b, err := secret.Prompt(tty, out, "Token PIN: ")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPINMissing, err)
	}
	if err := checkPIN(string(b)); err != nil {
		return nil, fmt.Errorf("%w: the PIN entered %w", ErrPINMissing, err)
	}
	return b, nil
}

// ReadPIN returns the PIN from its source (see PINSource for the order).
func ReadPIN(src PINSource) (string, error) {
	src, err := src.Resolve()
	return src.pin, err
}

// ReadPINFile reads a PIN from a regular file of at most MaxPINFile bytes,
// trimming one trailing newline (LF or CR LF). A file that every user of the
// machine may read or write is refused, as ssh refuses such a key file; so
// are an empty PIN and one holding a NUL or other control character.
func ReadPINFile(path string) (string, error) {
	b, err := safefile.ReadSecret(path, MaxPINFile, 0)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrPINMissing, err)
	}
	pin := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if pin == "" {
		return "", fmt.Errorf("%w: the PIN file %s is empty", ErrPINMissing, path)
	}
	if err := checkPIN(pin); err != nil {
		return "", fmt.Errorf("%w: the PIN file %s %w", ErrPINMissing, path, err)
	}
	return pin, nil
}

// checkPIN refuses control characters: a NUL would cut the PIN short in
// the module, and a stray CR or escape is a broken file, not a PIN.
func checkPIN(pin string) error {
	if len(pin) > MaxPINFile {
		return fmt.Errorf("is longer than %d bytes", MaxPINFile)
	}
	for _, r := range pin {
		if r < 0x20 || r == 0x7f {
			return errors.New("holds a control character (a NUL, CR, or the like)")
		}
	}
	return nil
}

// ErrSecretFileMode is returned for a secret file that others may access.
var ErrSecretFileMode = safefile.ErrSecretMode

// ErrSecretFile is returned for an input file that is not a small regular file.
var ErrSecretFile = safefile.ErrInput

// CheckSecretFile refuses a file holding a secret that every user of the
// machine may read or write (mode o+rwx). Group access is allowed: a service
// and its operators often share a group.
func CheckSecretFile(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return nil // reading it will say what is wrong
	}
	if st.Mode().Perm()&0o007 != 0 {
		return fmt.Errorf("%w: %s has mode %04o; run chmod o-rwx %s", ErrSecretFileMode, path, st.Mode().Perm(), path)
	}
	return nil
}
