package pkcs11

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

// PINEnv is the environment variable that may hold the PIN.
const PINEnv = "SIGNAGENT_PIN"

// PINFileEnv is the environment variable that may name a file holding the PIN.
const PINFileEnv = "SIGNAGENT_PIN_FILE"

// PINSource says where to get the PIN from. There is deliberately no way to
// pass the PIN itself on the command line.
type PINSource struct {
	File   string    // a file holding the PIN (trailing newline trimmed)
	Prompt bool      // ask on the terminal when no other source gives one
	TTY    *os.File  // the terminal to prompt on (default: stdin)
	Out    io.Writer // where the prompt goes (default: stderr)
}

// ReadPIN returns the PIN from, in order: $SIGNAGENT_PIN, the file
// (src.File, else $SIGNAGENT_PIN_FILE), or a prompt without echo when src
// allows it and the input is a terminal.
func ReadPIN(src PINSource) (string, error) {
	if pin, ok := os.LookupEnv(PINEnv); ok && pin != "" {
		return pin, nil
	}
	file := src.File
	if file == "" {
		file = os.Getenv(PINFileEnv)
	}
	if file != "" {
		return ReadPINFile(file)
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
		fmt.Fprint(out, "Token PIN: ")
		b, err := term.ReadPassword(int(tty.Fd()))
		fmt.Fprintln(out)
		if err != nil {
			return "", fmt.Errorf("%w: could not read it from the terminal: %w", ErrPINMissing, err)
		}
		if len(b) == 0 {
			return "", fmt.Errorf("%w: the PIN entered is empty", ErrPINMissing)
		}
		return string(b), nil
	}
	return "", fmt.Errorf("%w: set %s, give --pin-file (or %s), or run on a terminal to be asked", ErrPINMissing, PINEnv, PINFileEnv)
}

// ReadPINFile reads a PIN from a file, trimming one trailing newline (LF or
// CR LF). A file that every user of the machine may read or write is
// refused, as ssh refuses such a key file; an empty PIN is an error.
func ReadPINFile(path string) (string, error) {
	if err := CheckSecretFile(path); err != nil {
		return "", fmt.Errorf("%w: %w", ErrPINMissing, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: could not read the PIN file: %w", ErrPINMissing, err)
	}
	pin := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if pin == "" {
		return "", fmt.Errorf("%w: the PIN file %s is empty", ErrPINMissing, path)
	}
	return pin, nil
}

// ErrSecretFileMode is returned for a secret file that others may access.
var ErrSecretFileMode = errors.New("a secret file is accessible to every user")

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
