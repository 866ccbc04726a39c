package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

// settings reads a command's settings with the precedence flag >
// environment > configuration file > default. The file is YAML whose keys
// are the flags' names (without dashes in front), so every flag has its
// equivalent there.
type settings struct {
	c    *cli.Context
	file map[string]any
}

// loadSettings reads the configuration file, if any, and refuses keys that
// are not flags of the command (a misspelt key would silently do nothing).
func loadSettings(c *cli.Context, path string) (*settings, error) {
	s := &settings{c: c, file: map[string]any{}}
	if path == "" {
		return s, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErr(fmt.Errorf("could not read the configuration file: %w", err))
	}
	if err := yaml.Unmarshal(b, &s.file); err != nil {
		return nil, usageErr(fmt.Errorf("%s: %w", path, err))
	}
	known := map[string]bool{}
	for _, f := range c.Command.Flags {
		for _, n := range f.Names() {
			known[n] = true
		}
	}
	for k := range s.file {
		if !known[k] || k == "config" {
			return nil, usageErr(fmt.Errorf("%s: unknown setting %q (settings are the flags of `signagent serve --help`, without the dashes)", path, k))
		}
	}
	return s, nil
}

// fromFile returns the file's value for a flag not given on the command
// line or in the environment.
func (s *settings) fromFile(name string) (any, bool) {
	if s.c.IsSet(name) {
		return nil, false
	}
	v, ok := s.file[name]
	return v, ok
}

func (s *settings) String(name string) string {
	if v, ok := s.fromFile(name); ok {
		return fmt.Sprint(v)
	}
	return s.c.String(name)
}

func (s *settings) Bool(name string) (bool, error) {
	if v, ok := s.fromFile(name); ok {
		b, ok := v.(bool)
		if !ok {
			return false, usageErr(fmt.Errorf("setting %s: want true or false, not %v", name, v))
		}
		return b, nil
	}
	return s.c.Bool(name), nil
}

func (s *settings) Int(name string) (int, error) {
	if v, ok := s.fromFile(name); ok {
		n, err := strconv.Atoi(fmt.Sprint(v))
		if err != nil {
			return 0, usageErr(fmt.Errorf("setting %s: want a whole number, not %v", name, v))
		}
		return n, nil
	}
	return s.c.Int(name), nil
}

func (s *settings) Duration(name string) (time.Duration, error) {
	if v, ok := s.fromFile(name); ok {
		d, err := time.ParseDuration(fmt.Sprint(v))
		if err != nil {
			return 0, usageErr(fmt.Errorf("setting %s: want a duration like 30s or 12h, not %v", name, v))
		}
		return d, nil
	}
	return s.c.Duration(name), nil
}

func (s *settings) Strings(name string) ([]string, error) {
	if v, ok := s.fromFile(name); ok {
		switch x := v.(type) {
		case []any:
			out := make([]string, len(x))
			for i, e := range x {
				out[i] = fmt.Sprint(e)
			}
			return out, nil
		case string:
			return []string{x}, nil
		}
		return nil, usageErr(fmt.Errorf("setting %s: want a list, not %v", name, v))
	}
	return s.c.StringSlice(name), nil
}

func (s *settings) Ints(name string) ([]int, error) {
	strs, err := s.Strings(name)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range strs {
		for _, part := range strings.Split(e, ",") {
			if part = strings.TrimSpace(part); part == "" {
				continue
			}
			n, err := strconv.Atoi(part)
			if err != nil {
				return nil, usageErr(fmt.Errorf("setting %s: %q is not a number", name, part))
			}
			out = append(out, n)
		}
	}
	return out, nil
}

// errs collects the first error of several reads.
type errs struct{ err error }

func (e *errs) check(err error) {
	if e.err == nil && err != nil {
		e.err = err
	}
}
