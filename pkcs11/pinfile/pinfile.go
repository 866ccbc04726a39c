// Package pinfile is what a PIN is, read from a file or elsewhere: at
// most Max bytes, no control character (Parse, Secret), and a file that
// others may read refused (Read). It needs nothing of package pkcs11, whose
// PINSource uses it.
package pinfile

import (
	"errors"
	"fmt"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/pkcs11/tokenerr"
)

// Max is the most a PIN file may hold. A PIN is a few to a few dozen
// characters; a larger file is a mistake (or /dev/zero), not a PIN.
const Max = 512

// Secret is a PIN's source with its limits (at most
// Max bytes, no control character); the caller adds the
// environment, the configuration file and the prompt.
func Secret(file string) secret.Source {
	return secret.Source{What: "the PIN", File: file, Max: Max, Parse: Parse}
}

// Read reads a PIN from a regular file of at most Max bytes,
// trimming one trailing newline (LF or CR LF). A file that every user of the
// machine may read or write is refused, as ssh refuses such a key file; so
// are an empty PIN and one holding a NUL or other control character.
func Read(path string) (string, error) {
	got, err := Secret(path).Resolve()
	if err != nil {
		return "", errdefs.Mark(err, tokenerr.ErrPINMissing)
	}
	return got.Value, nil
}

// Parse refuses control characters: a NUL would cut the PIN short in
// the module, and a stray CR or escape is a broken file, not a PIN.
func Parse(pin string) (string, error) {
	if len(pin) > Max {
		return "", fmt.Errorf("is longer than %d bytes", Max)
	}
	for _, r := range pin {
		if r < 0x20 || r == 0x7f {
			return "", errors.New("holds a control character (a NUL, CR, or the like)")
		}
	}
	return pin, nil
}
