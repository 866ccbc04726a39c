package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The old spellings of this release's renames (the commands before the
// nouns, --base-url, --api-url, --auth-url, their variables and settings
// keys) are used here on purpose: each still works for one release, with
// one line on stderr naming the new one, and is shown nowhere.

// renameLine is the line an old spelling writes.
func renameLine(old, now string) string {
	return fmt.Sprintf("signagent: `%s` is now `%s`; the old name goes in the next release\n", old, now)
}

// renameEnv is an environment where no command reaches a token, a service
// or a settings file of the machine: each stops at a missing setting or a
// bad value, the same for the old spelling as for the new one.
func renameEnv(t *testing.T) string {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, v := range []string{"SIGNAGENT_API_KEY", "SIGNAGENT_API_KEY_FILE", "SIGNAGENT_DEVELOPER_KEY", "SIGNAGENT_DEVELOPER_KEY_FILE",
		"SIGNAGENT_CLIENT_SECRET", "SIGNAGENT_CLIENT_SECRET_FILE", "SIGNAGENT_CLIENT_ID", "SIGNAGENT_SPACE", "SIGNAGENT_PIN", "SIGNAGENT_PIN_FILE",
		"SIGNAGENT_TRUSTED_URL", "SIGNAGENT_BUSINESS_URL", "SIGNAGENT_OIDC_URL", "SIGNAGENT_BASE_URL", "SIGNAGENT_API_URL", "SIGNAGENT_AUTH_URL",
		"SIGNAGENT_AGENT_SOCK", "SIGNAGENT_CONFIG", "SIGNAGENT_CONTEXT", "SIGNAGENT_STORE"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	t.Setenv("SIGNAGENT_PKCS11_MODULE", filepath.Join(dir, "no-module.so"))
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	return dir
}

func runArgs(args ...string) (code int, stdout, stderr string) {
	var out, errOut strings.Builder
	code = run(append([]string{"signagent"}, args...), strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestOldCommandNames: each command's name before the nouns runs the
// command, hidden: the same exit, stdout and stderr as the new spelling,
// after one line naming it. `signagent token` alone is still the access
// token, naming `signagent oidc token`.
func TestOldCommandNames(t *testing.T) {
	dir := renameEnv(t)
	for _, tc := range []struct {
		old, now []string
		args     []string // given to both
	}{
		{[]string{"canonical"}, []string{"trusted", "canonical"}, []string{"--phone", "9161234567"}},
		{[]string{"sign"}, []string{"trusted", "sign"}, []string{"--phone", "9161234567"}},
		{[]string{"link"}, []string{"trusted", "link"}, []string{"--phone", "9161234567", "--service-user-id", "crm-42"}},
		{[]string{"session"}, []string{"trusted", "session"}, []string{"--phone", "9161234567", "--service-user-id", "crm-42"}},
		{[]string{"legacy-token"}, []string{"legacy", "token"}, []string{"--by", "password", "--login", "alice"}},
		{[]string{"login"}, []string{"oidc", "login"}, nil},
		{[]string{"logout"}, []string{"oidc", "logout"}, nil},
		{[]string{"status"}, []string{"oidc", "status"}, nil},
		{[]string{"token"}, []string{"oidc", "token"}, nil},
		{[]string{"tokens"}, []string{"token", "list"}, nil},
		{[]string{"keys"}, []string{"token", "keys"}, nil},
		{[]string{"dev-token"}, []string{"token", "dev"}, []string{"--key-type", "bogus"}},
		{[]string{"verify"}, []string{"trusted", "verify"}, []string{"--signature", filepath.Join(dir, "none.der"), "--content", filepath.Join(dir, "none")}},
	} {
		t.Run(tc.old[0], func(t *testing.T) {
			code, out, errOut := runArgs(append(tc.old, tc.args...)...)
			wantCode, wantOut, wantErr := runArgs(append(tc.now, tc.args...)...)
			line := renameLine(tc.old[0], "signagent "+strings.Join(tc.now, " "))
			if code != wantCode || out != wantOut || errOut != line+wantErr {
				t.Errorf("signagent %s: exit %d, stdout %q, stderr %q;\nwant exit %d, stdout %q, stderr %q", tc.old[0], code, out, errOut, wantCode, wantOut, line+wantErr)
			}
			if strings.Contains(wantErr, "is now") {
				t.Errorf("the new spelling names a rename: %q", wantErr)
			}
		})
	}
	// The token nouns are no old spelling: no line.
	if _, _, errOut := runArgs("token", "list"); strings.Contains(errOut, "is now") {
		t.Errorf("signagent token list: %q", errOut)
	}
	// A mistyped old name is answered with the new one.
	if code, _, errOut := runArgs("sesion"); code != 2 || !strings.Contains(errOut, `did you mean "trusted session"?`) {
		t.Errorf("sesion: exit %d, %q", code, errOut)
	}
}

// TestOldAddressFlags: --base-url, --api-url and --auth-url, and their
// variables, give their value to --trusted-url, --business-url and
// --oidc-url (the error quotes it), with one line naming the new one; a
// flag beats a variable whichever its spelling.
func TestOldAddressFlags(t *testing.T) {
	dir := renameEnv(t)
	secret := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("s3cret-"+name+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("SIGNAGENT_API_KEY_FILE", secret("api-key"))
	t.Setenv("SIGNAGENT_DEVELOPER_KEY_FILE", secret("developer-key"))
	t.Setenv("SIGNAGENT_CLIENT_SECRET_FILE", secret("client-secret"))
	link := []string{"trusted", "link", "--phone", "9161234567", "--service-user-id", "crm-42"}
	legacy := []string{"legacy", "token", "--by", "password", "--login", "alice"}
	login := []string{"oidc", "login", "--space", "staging", "--client-id", "crm"}
	for _, tc := range []struct {
		name      string
		env       []string // NAME=VALUE
		args      []string
		line      string // "" for none
		wantValue string // quoted by the error
	}{
		{"--base-url", nil, append(link, "--base-url", "ftp://old-flag/"), renameLine("--base-url", "--trusted-url"), "ftp://old-flag/"},
		{"SIGNAGENT_BASE_URL", []string{"SIGNAGENT_BASE_URL=ftp://old-var/"}, link, renameLine("SIGNAGENT_BASE_URL", "SIGNAGENT_TRUSTED_URL"), "ftp://old-var/"},
		{"--api-url", nil, append(legacy, "--api-url", "ftp://old-flag/"), renameLine("--api-url", "--business-url"), "ftp://old-flag/"},
		{"SIGNAGENT_API_URL", []string{"SIGNAGENT_API_URL=ftp://old-var/"}, legacy, renameLine("SIGNAGENT_API_URL", "SIGNAGENT_BUSINESS_URL"), "ftp://old-var/"},
		{"--auth-url", nil, append(login, "--auth-url", "ftp://old-flag/"), renameLine("--auth-url", "--oidc-url"), "ftp://old-flag/"},
		{"SIGNAGENT_AUTH_URL", []string{"SIGNAGENT_AUTH_URL=ftp://old-var/"}, login, renameLine("SIGNAGENT_AUTH_URL", "SIGNAGENT_OIDC_URL"), "ftp://old-var/"},
		// The old flag beats the new variable; the new flag beats the old
		// variable (still named: it was given).
		{"--base-url over SIGNAGENT_TRUSTED_URL", []string{"SIGNAGENT_TRUSTED_URL=ftp://new-var/"}, append(link, "--base-url", "ftp://old-flag/"),
			renameLine("--base-url", "--trusted-url"), "ftp://old-flag/"},
		{"--trusted-url over SIGNAGENT_BASE_URL", []string{"SIGNAGENT_BASE_URL=ftp://old-var/"}, append(link, "--trusted-url", "ftp://new-flag/"),
			renameLine("SIGNAGENT_BASE_URL", "SIGNAGENT_TRUSTED_URL"), "ftp://new-flag/"},
		{"SIGNAGENT_TRUSTED_URL over SIGNAGENT_BASE_URL", []string{"SIGNAGENT_TRUSTED_URL=ftp://new-var/", "SIGNAGENT_BASE_URL=ftp://old-var/"}, link,
			renameLine("SIGNAGENT_BASE_URL", "SIGNAGENT_TRUSTED_URL"), "ftp://new-var/"},
		{"the new words", []string{"SIGNAGENT_BUSINESS_URL=ftp://new-var/"}, legacy, "", "ftp://new-var/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, e := range tc.env {
				k, v, _ := strings.Cut(e, "=")
				t.Setenv(k, v)
			}
			defer func() {
				for _, e := range tc.env {
					k, _, _ := strings.Cut(e, "=")
					os.Unsetenv(k)
				}
			}()
			code, _, errOut := runArgs(tc.args...)
			rest, ok := strings.CutPrefix(errOut, tc.line)
			if code != 2 || !ok || strings.Count(rest, "\n") != 1 || !strings.Contains(rest, `"`+tc.wantValue+`"`) || strings.Contains(rest, "is now") {
				t.Errorf("exit %d, stderr %q; want exit 2, %q and one line quoting %q", code, errOut, tc.line, tc.wantValue)
			}
		})
	}
}

// TestOldSettingsKeys: a settings file with the old keys (at the top and
// in a context) is read as with the new ones, with one line naming each;
// config get and set take the old key and write the new one.
func TestOldSettingsKeys(t *testing.T) {
	dir := renameEnv(t)
	dk := filepath.Join(dir, "developer-key")
	os.WriteFile(dk, []byte("testClient-0a1b2c3d4e\n"), 0o600)
	t.Setenv("SIGNAGENT_DEVELOPER_KEY_FILE", dk)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("base-url: https://trusted.example/\ncurrent-context: a\ncontexts:\n  a:\n    api-url: ftp://from-the-file/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runArgs("legacy", "token", "--config", cfg, "--by", "password", "--login", "alice")
	want := renameLine("api-url (in "+cfg+")", "business-url") + renameLine("base-url (in "+cfg+")", "trusted-url")
	rest, ok := strings.CutPrefix(errOut, want)
	if code != 2 || !ok || !strings.Contains(rest, `"ftp://from-the-file/"`) || strings.Count(rest, "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want %q and the file's business-url refused", code, errOut, want)
	}
	// config get: the old key is the new one's value.
	code, out, errOut := runArgs("config", "get", "--config", cfg, "base-url")
	if code != 0 || out != "https://trusted.example/\n" || errOut != renameLine("base-url", "trusted-url") {
		t.Errorf("config get base-url: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// config set: the old key writes the new one, and the old one goes.
	code, _, errOut = runArgs("config", "set", "--config", cfg, "base-url", "https://other.example/")
	b, _ := os.ReadFile(cfg)
	if code != 0 || errOut != renameLine("base-url", "trusted-url") || !strings.Contains(string(b), "trusted-url: https://other.example/") || strings.Contains(string(b), "base-url") {
		t.Errorf("config set base-url: exit %d, stderr %q, file:\n%s", code, errOut, b)
	}
	// unset removes an old key too.
	if code, _, errOut = runArgs("config", "unset", "--config", cfg, "--context", "a", "business-url"); code != 0 || errOut != "" {
		t.Errorf("config unset business-url (held as api-url): exit %d, %q", code, errOut)
	}
	if b, _ := os.ReadFile(cfg); strings.Contains(string(b), "api-url") {
		t.Errorf("api-url left:\n%s", b)
	}
}

// oldWords are the old spellings, none of which help, completion or the
// manual page may show (--legacy-token-ttl is no old name, nor the
// development token's directory, dev-token[-KIND]).
var oldWords = regexp.MustCompile(`(?:^|[^\w-]|--)(base-url|api-url|auth-url|SIGNAGENT_BASE_URL|SIGNAGENT_API_URL|SIGNAGENT_AUTH_URL|legacy-token|dev-token)(?:[^\w\[-]|$)`)

// TestRootHelpHasFifteenCommands: signagent --help lists at most 15
// commands, the nouns among them, and no old name.
func TestRootHelpHasFifteenCommands(t *testing.T) {
	renameEnv(t)
	code, out, _ := runArgs("--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	_, commands, _ := strings.Cut(out, "COMMANDS:\n")
	commands, _, _ = strings.Cut(commands, "\nGLOBAL OPTIONS:")
	var names []string
	for _, l := range strings.Split(commands, "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(l, "     ") {
			names = append(names, f[0])
		}
	}
	if len(names) > 15 {
		t.Errorf("%d commands in the root help, want at most 15: %v", len(names), names)
	}
	for _, want := range []string{"oidc", "trusted", "legacy", "token", "header", "api", "doctor", "serve", "agent", "config", "setup", "store-key", "completion", "man", "version"} {
		if !slices.Contains(names, want) {
			t.Errorf("the root help lacks %s: %v", want, names)
		}
	}
	for _, old := range []string{"canonical", "sign", "link", "session", "legacy-token", "login", "logout", "status", "tokens", "keys", "dev-token", "verify"} {
		if slices.Contains(names, old) {
			t.Errorf("the root help lists the old name %s", old)
		}
	}
	t.Logf("%d top-level commands: %v", len(names), names)
}

// TestOldNamesHidden: no help of any command, no completion and no manual
// page shows an old spelling.
func TestOldNamesHidden(t *testing.T) {
	renameEnv(t)
	pages := map[string]string{}
	for _, path := range [][]string{{}, {"trusted"}, {"legacy"}, {"oidc"}, {"token"}, {"config"}, {"serve"}, {"header"}, {"api"}, {"setup"},
		{"trusted", "session"}, {"trusted", "link"}, {"legacy", "token"}, {"oidc", "login"}, {"oidc", "token"}, {"doctor"}, {"trusted", "verify"}, {"token", "dev"}} {
		_, out, _ := runArgs(append(path, "--help")...)
		pages["signagent "+strings.Join(path, " ")+" --help"] = out
	}
	_, man, _ := runArgs("man")
	pages["signagent man"] = man
	complete := func(line ...string) string {
		_, out, _ := runArgs(append(line, "--generate-bash-completion")...)
		return out
	}
	pages["completion of signagent"] = complete("")
	for _, cmd := range [][]string{{"serve"}, {"trusted", "session"}, {"legacy", "token"}, {"oidc", "login"}, {"setup"}, {"doctor"}, {"token"}} {
		pages["completion of signagent "+strings.Join(cmd, " ")+" --"] = complete(append(cmd, "--")...)
	}
	for name, text := range pages {
		if m := oldWords.FindStringSubmatch(text); m != nil {
			t.Errorf("%s shows the old spelling %s", name, m[1])
		}
	}
	// The commands completed at the top are the root help's.
	top := strings.Fields(pages["completion of signagent"])
	for _, old := range []string{"canonical", "sign", "link", "session", "login", "logout", "status", "tokens", "keys", "verify"} {
		if slices.Contains(top, old) {
			t.Errorf("completion offers the old command %s: %v", old, top)
		}
	}
	if !slices.Contains(top, "oidc") || !slices.Contains(top, "trusted") {
		t.Errorf("completion at the top: %v", top)
	}
	// The manual's commands are the tree's, none of the old ones.
	for _, old := range []string{"canonical", "sign", "link", "session", "login", "logout", "tokens", "verify"} {
		if strings.Contains(man, "\n.SH "+old+"\n") {
			t.Errorf("the manual page has the old command %s", old)
		}
	}
	// --help of a command with no subcommand shows none of the hidden
	// flags of the token noun either.
	if strings.Contains(pages["signagent token --help"], "--profile") {
		t.Errorf("signagent token --help shows oidc token's flags:\n%s", pages["signagent token --help"])
	}
}
