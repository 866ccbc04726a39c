// Package settings reads a command's settings with the precedence flag >
// environment > configuration file > default. The file is YAML whose keys
// are the flags' names (without dashes), so every flag has its equivalent
// there.
package settings

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/safefile"
	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

// ErrInvalid marks a bad configuration file or value: the operator's input.
var ErrInvalid = errdefs.New(errdefs.ErrInvalidInput, "invalid setting")

func bad(err error) error { return invalid{err} }

type invalid struct{ err error }

func (e invalid) Error() string        { return e.err.Error() }
func (e invalid) Unwrap() error        { return e.err }
func (e invalid) Is(target error) bool { return target == ErrInvalid || errors.Is(ErrInvalid, target) }

// Settings are one command's settings.
type Settings struct {
	c    *cli.Context
	file map[string]any
	err  error
}

// Of returns the settings of a command without a configuration file.
func Of(c *cli.Context) *Settings { return &Settings{c: c, file: map[string]any{}} }

// Load reads the configuration file, if any (at most 1 MiB), and refuses
// keys that are not flags of the command (a misspelt key would silently do
// nothing).
func Load(c *cli.Context, path string) (*Settings, error) {
	s := Of(c)
	if path == "" || path == os.DevNull {
		return s, nil
	}
	b, err := safefile.Read(path, 1<<20)
	if err != nil {
		return nil, bad(fmt.Errorf("could not read the configuration file: %w", err))
	}
	if err := yaml.Unmarshal(b, &s.file); err != nil {
		return nil, bad(fmt.Errorf("%s: %w", path, err))
	}
	known := map[string]bool{}
	for _, f := range c.Command.Flags {
		for _, n := range f.Names() {
			known[n] = true
		}
	}
	for k := range s.file {
		if !known[k] || k == "config" {
			return nil, bad(fmt.Errorf("%s: unknown setting %q (settings are the flags of `signagent serve --help`, without the dashes)", path, k))
		}
	}
	return s, nil
}

// given returns the context in which name was given (as a flag or in the
// environment): the command's own, or one before it, for the flags every
// command shares (`signagent --log-level warn serve`); nil if none.
func (s *Settings) given(name string) *cli.Context {
	for _, c := range s.c.Lineage() {
		if c.IsSet(name) {
			return c
		}
	}
	return nil
}

// fromFile returns the file's value for a flag not given on the command
// line or in the environment.
func (s *Settings) fromFile(name string) (any, bool) {
	if s.given(name) != nil {
		return nil, false
	}
	v, ok := s.file[name]
	return v, ok
}

// Place returns a text setting as given on the command line (or in the
// flag's environment variable, if it has one) and as the configuration
// file gives it, for a setting whose sources rank apart: a secret's file,
// where the flag beats the environment, which beats the file (see
// internal/secret).
func (s *Settings) Place(name string) (given, file string) {
	if c := s.given(name); c != nil {
		given = c.String(name)
	}
	if v, ok := s.file[name]; ok {
		file = fmt.Sprint(v)
	}
	return given, file
}

// String is a text setting.
func (s *Settings) String(name string) string {
	if v, ok := s.fromFile(name); ok {
		return fmt.Sprint(v)
	}
	if c := s.given(name); c != nil {
		return c.String(name)
	}
	return s.c.String(name)
}

// fail records the first bad value; Err returns it.
func (s *Settings) fail(name, want string, v any) {
	if s.err == nil {
		s.err = bad(fmt.Errorf("setting %s: want %s, not %v", name, want, v))
	}
}

// Err is the first bad value a getter met (the getter returned the zero
// value for it).
func (s *Settings) Err() error { return s.err }

// Bool is a true/false setting.
func (s *Settings) Bool(name string) bool {
	if v, ok := s.fromFile(name); ok {
		b, ok := v.(bool)
		if !ok {
			s.fail(name, "true or false", v)
		}
		return b
	}
	return s.c.Bool(name)
}

// Int is a whole-number setting.
func (s *Settings) Int(name string) int {
	if v, ok := s.fromFile(name); ok {
		n, err := strconv.Atoi(fmt.Sprint(v))
		if err != nil {
			s.fail(name, "a whole number", v)
		}
		return n
	}
	return s.c.Int(name)
}

// Duration is a setting like 30s or 12h.
func (s *Settings) Duration(name string) time.Duration {
	if v, ok := s.fromFile(name); ok {
		d, err := time.ParseDuration(fmt.Sprint(v))
		if err != nil {
			s.fail(name, "a duration like 30s or 12h", v)
		}
		return d
	}
	return s.c.Duration(name)
}

// Strings is a list setting (a single text in the file is a list of one).
func (s *Settings) Strings(name string) []string {
	if v, ok := s.fromFile(name); ok {
		switch x := v.(type) {
		case []any:
			out := make([]string, len(x))
			for i, e := range x {
				out[i] = fmt.Sprint(e)
			}
			return out
		case string:
			return []string{x}
		}
		s.fail(name, "a list", v)
		return nil
	}
	return s.c.StringSlice(name)
}

// Ints is a list of numbers, each entry possibly comma-separated.
func (s *Settings) Ints(name string) []int {
	var out []int
	for _, e := range s.Strings(name) {
		for _, part := range strings.Split(e, ",") {
			if part = strings.TrimSpace(part); part == "" {
				continue
			}
			n, err := strconv.Atoi(part)
			if err != nil {
				s.fail(name, "numbers", part)
				return nil
			}
			out = append(out, n)
		}
	}
	return out
}

// Context is the command context the settings are read from.
func (s *Settings) Context() *cli.Context { return s.c }
