package secret

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/safefile"
)

// The environment variables that may hold the PIN, or name its file. They
// are read here and nowhere else (the pkcs11 package reads no variable).
const (
	PINEnv     = "SIGNAGENT_PIN"
	PINFileEnv = "SIGNAGENT_PIN_FILE"
)

// ErrMissing marks the error of a secret no source gives (its text is not
// added). Callers mark it with their own kind (a missing PIN, API key).
var ErrMissing = errors.New("secret not given")

func missing(format string, args ...any) error {
	return errdefs.Mark(fmt.Errorf(format, args...), ErrMissing)
}

// DefaultMax is the most a secret file may hold unless the Source says
// otherwise: keys, passwords and session ids are far smaller.
const DefaultMax = 4096

// Source says where one secret may come from. Every secret of signagent
// (PIN, API key, developer key, client secret, password, auth.sid, store
// password) is resolved by Resolve, in one order:
//
//  1. the file a flag names (File; for the PIN also a pkcs11: URI's
//     pin-source, merged into the selection before the PIN is read),
//  2. the environment variable holding the secret itself (Env),
//  3. the environment variable naming a file (EnvFile),
//  4. the file the configuration file names (ConfigFile),
//  5. a prompt without echo, when Prompt is set and TTY is a terminal.
//
// A file is read with safefile.ReadSecret (a regular file of at most Max
// bytes that other users may not read), one trailing newline (LF or CR LF)
// is dropped, and an empty one is refused. An empty variable counts as
// unset.
type Source struct {
	What       string // "the PIN", "the API key": named in errors and in From
	Flag       string // the flag that names File, "--pin-file" (for errors)
	File       string // the file the flag (or the URI) names
	Env        string // the variable holding the secret
	EnvFile    string // the variable naming a file that holds it
	ConfigFile string // the file named in the configuration file
	ConfigKey  string // that file's key, "pin-file" (for errors)
	Prompt     string // the prompt's label; empty: never ask
	TTY        *os.File
	Out        io.Writer
	Max        int64       // default DefaultMax
	Forbidden  os.FileMode // permission bits refused besides others' (0o007)
	// Parse, when set, checks the value and returns it normalized; its
	// error must not quote the value.
	Parse func(v string) (string, error)
	Hint  string // one more way to give it, named in the missing error
}

// Secret is a resolved secret and where it came from ("the file /x
// (--pin-file)", "$SIGNAGENT_PIN"). From never holds the value.
type Secret struct {
	Value string
	From  string
}

// Given reports whether a source other than the prompt names the secret:
// whether Resolve would read something rather than ask or fail.
func (s Source) Given() bool {
	return s.File != "" || s.env(s.Env) != "" || s.env(s.EnvFile) != "" || s.ConfigFile != ""
}

func (s Source) env(name string) string {
	if name == "" {
		return ""
	}
	return os.Getenv(name)
}

// Resolve returns the secret from the first source that gives it.
func (s Source) Resolve() (Secret, error) {
	switch {
	case s.File != "":
		return s.file(s.File, s.Flag)
	case s.env(s.Env) != "":
		return s.value(s.env(s.Env), "$"+s.Env)
	case s.env(s.EnvFile) != "":
		return s.file(s.env(s.EnvFile), "$"+s.EnvFile)
	case s.ConfigFile != "":
		key := s.ConfigKey
		if key == "" {
			key = "the configuration file"
		} else {
			key = key + " in the configuration file"
		}
		return s.file(s.ConfigFile, key)
	}
	if s.Prompt != "" {
		tty := s.TTY
		if tty == nil {
			tty = os.Stdin
		}
		if IsTerminal(tty) {
			out := s.Out
			if out == nil {
				out = os.Stderr
			}
			b, err := Prompt(tty, out, s.Prompt)
			if err != nil {
				return Secret{}, missing("%s: %w", s.What, err)
			}
			return s.value(string(b), "the terminal")
		}
	}
	return Secret{}, missing("%s", s.ways())
}

// ways says what could have given the secret.
func (s Source) ways() string {
	var ways []string
	if s.Flag != "" {
		ways = append(ways, "give "+s.Flag)
	}
	var vars []string
	for _, v := range []string{s.Env, s.EnvFile} {
		if v != "" {
			vars = append(vars, v)
		}
	}
	if len(vars) > 0 {
		ways = append(ways, "set "+strings.Join(vars, " or "))
	}
	if s.Hint != "" {
		ways = append(ways, s.Hint)
	}
	if s.Prompt != "" {
		ways = append(ways, "run on a terminal to be asked")
	}
	msg := "no " + strings.TrimPrefix(s.What, "the ")
	switch len(ways) {
	case 0:
		return msg
	case 1:
		return msg + ": " + ways[0]
	case 2:
		return msg + ": " + ways[0] + ", " + ways[1]
	}
	return msg + ": " + strings.Join(ways[:len(ways)-1], ", ") + ", or " + ways[len(ways)-1]
}

func (s Source) file(path, by string) (Secret, error) {
	max := s.Max
	if max == 0 {
		max = DefaultMax
	}
	from := "the file " + path
	if by != "" {
		from += " (" + by + ")"
	}
	b, err := safefile.ReadSecret(path, max, s.Forbidden)
	if err != nil {
		return Secret{}, fmt.Errorf("%s: %w", s.What, err)
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return Secret{}, missing("%s: %s is empty", s.What, from)
	}
	return s.value(v, from)
}

func (s Source) value(v, from string) (Secret, error) {
	if s.Parse != nil {
		var err error
		if v, err = s.Parse(v); err != nil {
			return Secret{}, fmt.Errorf("%s from %s: %w", s.What, from, err)
		}
	}
	return Secret{Value: v, From: from}, nil
}
