// Package settings reads a command's settings with the precedence flag >
// environment > settings file > default. The file is YAML whose keys are
// the flags' names (without dashes), so every flag has its equivalent
// there, with named contexts (File); every command reads it.
package settings

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/signagent/signagent/errdefs"
	"github.com/urfave/cli/v2"
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
	errs []error
	bad  map[string]bool
}

// fileKey is where Attach keeps the run's settings file.
const fileKey = "signagent/settings-file"

// Attach makes f the settings file every Of of this run reads.
func Attach(app *cli.App, f *File) {
	if app.Metadata == nil {
		app.Metadata = map[string]any{}
	}
	app.Metadata[fileKey] = f
}

// Attached is the run's settings file (nil before Attach).
func Attached(app *cli.App) *File {
	f, _ := app.Metadata[fileKey].(*File)
	return f
}

// Of returns the settings of a command: its flags and environment over
// the run's settings file (Attach), if any.
func Of(c *cli.Context) *Settings {
	s := &Settings{c: c, file: map[string]any{}}
	if f := Attached(c.App); f != nil {
		s.file = f.values
	}
	return s
}

// Load reads a settings file for c (see ReadFile: context "" is its
// current one) and returns c's settings over it. An old key in the file
// is named on the app's stderr.
func Load(c *cli.Context, path, context string, must bool, known func(string) bool) (*Settings, error) {
	f, err := ReadFile(path, context, must, known)
	if err != nil {
		return nil, err
	}
	if c.App != nil && c.App.ErrWriter != nil {
		f.SayRenamedKeys(c.App.ErrWriter)
	}
	return &Settings{c: c, file: f.values}, nil
}

// given returns the context in which name was given (as a flag or in the
// environment): the command's own, or one before it, for the flags every
// command shares (`signagent --log-level warn serve`); nil if none.
func (s *Settings) given(name string) *cli.Context { return GivenIn(s.c, name) }

// GivenIn is the context in which name was given (as a flag or in its
// variable): c, or one before it for the flags every command shares; nil
// if none.
func GivenIn(c *cli.Context, name string) *cli.Context {
	for _, ctx := range c.Lineage() {
		if ctx.IsSet(name) {
			return ctx
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

// fail records a bad value, once per setting however often it is read;
// Err returns them all.
func (s *Settings) fail(name, want string, v any) {
	if s.bad[name] {
		return
	}
	if s.bad == nil {
		s.bad = map[string]bool{}
	}
	s.bad[name] = true
	s.errs = append(s.errs, bad(fmt.Errorf("setting %s: want %s, not %v", name, want, v)))
}

// Err is every bad value the getters met, each named once (the getter
// returned the zero value for it); nil when there was none.
func (s *Settings) Err() error {
	if len(s.errs) == 0 {
		return nil
	}
	return joined(s.errs)
}

// Join is errs as one error in one line, each message once: errors that
// are themselves joined are opened, nil ones and repeats dropped (a bad
// value met by several readers is still named once). It is nil when no
// error is left.
func Join(errs ...error) error {
	var out joined
	seen := map[string]bool{}
	var add func(e error)
	add = func(e error) {
		if e == nil {
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				add(x)
			}
			return
		}
		if !seen[e.Error()] {
			seen[e.Error()] = true
			out = append(out, e)
		}
	}
	for _, e := range errs {
		add(e)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// joined is several errors as one, in one line.
type joined []error

func (j joined) Error() string {
	msgs := make([]string, len(j))
	for i, e := range j {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

func (j joined) Unwrap() []error { return j }

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
