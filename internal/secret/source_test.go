package secret

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// One order for every secret: the flag's file, the variable, the
// variable's file, the configuration's file; the first given wins even
// when a later one would fail.
func TestResolveOrder(t *testing.T) {
	flag := write(t, "flag", "from-flag\n", 0o600)
	envFile := write(t, "envfile", "from-env-file\r\n", 0o600)
	conf := write(t, "conf", "from-config", 0o600)
	src := Source{What: "the key", Flag: "--key-file", Env: "T_SECRET", EnvFile: "T_SECRET_FILE", ConfigKey: "key-file"}
	cases := []struct {
		name               string
		file, env, envFile string
		config             string
		want, wantFrom     string
	}{
		{"flag beats all", flag, "from-env", envFile, conf, "from-flag", "the file " + flag + " (--key-file)"},
		{"environment beats its file", "", "from-env", envFile, conf, "from-env", "$T_SECRET"},
		{"environment's file beats the configuration", "", "", envFile, conf, "from-env-file", "the file " + envFile + " ($T_SECRET_FILE)"},
		{"configuration last", "", "", "", conf, "from-config", "the file " + conf + " (key-file in the configuration file)"},
		{"a broken later source is not read", flag, "", "/nonexistent", "/nonexistent", "from-flag", "the file " + flag + " (--key-file)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("T_SECRET", c.env)
			t.Setenv("T_SECRET_FILE", c.envFile)
			s := src
			s.File, s.ConfigFile = c.file, c.config
			got, err := s.Resolve()
			if err != nil {
				t.Fatal(err)
			}
			if got.Value != c.want || got.From != c.wantFrom {
				t.Fatalf("got %q from %q, want %q from %q", got.Value, got.From, c.want, c.wantFrom)
			}
			if !s.Given() {
				t.Fatal("Given is false with a source")
			}
		})
	}
}

// What goes wrong is said in one line that names the secret and how to
// give it, never its value; each is ErrMissing or the file's error.
func TestResolveErrors(t *testing.T) {
	t.Setenv("T_SECRET", "")
	t.Setenv("T_SECRET_FILE", "")
	open := write(t, "open", "hunter2-secret", 0o644)
	empty := write(t, "empty", "\n", 0o600)
	bad := write(t, "bad", "bad\x00value", 0o600)
	parse := func(v string) (string, error) {
		if strings.ContainsRune(v, 0) {
			return "", errors.New("holds a control character")
		}
		return v, nil
	}
	base := Source{What: "the key", Flag: "--key-file", Env: "T_SECRET", EnvFile: "T_SECRET_FILE", Parse: parse}
	cases := []struct {
		name    string
		file    string
		missing bool
		want    string
	}{
		{"none", "", true, "no key: give --key-file, set T_SECRET or T_SECRET_FILE"},
		{"readable by others", open, false, "mode 0644; run chmod o-rwx"},
		{"empty", empty, true, "the key: the file " + empty + " (--key-file) is empty"},
		{"refused by Parse", bad, false, "the key from the file " + bad + " (--key-file): holds a control character"},
		{"missing file", "/nonexistent/key", false, "the key: could not read /nonexistent/key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := base
			s.File = c.file
			_, err := s.Resolve()
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, ErrMissing) != c.missing {
				t.Fatalf("errors.Is(ErrMissing) = %v: %v", !c.missing, err)
			}
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q, want one line with %q and no secret", err, c.want)
			}
		})
	}
	if base.Given() {
		t.Fatal("Given is true without a source")
	}
}

// Off a terminal, a source that may prompt says so but does not hang.
func TestResolveNoTerminal(t *testing.T) {
	t.Setenv("T_SECRET", "")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	_, err = Source{What: "the PIN", Flag: "--pin-file", Env: "T_SECRET", Prompt: "PIN: ", TTY: r}.Resolve()
	if !errors.Is(err, ErrMissing) || err.Error() != "no PIN: give --pin-file, set T_SECRET, or run on a terminal to be asked" {
		t.Fatalf("error %v", err)
	}
}

// Mask shows four characters of a long secret and none of a short one,
// with the length.
func TestMask(t *testing.T) {
	for in, want := range map[string]string{"": "…(0)", "12345678": "…(8)", "abcdefghij": "abcd…(10)"} {
		if got := Mask(in); got != want {
			t.Fatalf("Mask(%q) = %q, want %q", in, got, want)
		}
	}
}
