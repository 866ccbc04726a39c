package settings

import (
	"fmt"
	"io"
	"strings"
)

// Renamed are the settings renamed, old name to new: the service
// addresses are named by the service they reach, and the key's
// certificate file says what it is. Each old name keeps working for one
// release, hidden, as a flag (--base-url), its variable
// (SIGNAGENT_BASE_URL) and a key of the settings file, with one line on
// stderr naming the new one.
var Renamed = map[string]string{
	"base-url": "trusted-url",      // the trusted authentication service (auth.sid)
	"api-url":  "business-url",     // the business API (and the legacy scheme's Authenticate)
	"auth-url": "oidc-url",         // the OpenID Connect identity provider
	"cert":     "certificate-file", // the key's certificate, for a token that shows none
}

// OldName returns the old name of a renamed setting, "" when it has none.
func OldName(name string) string {
	for old, n := range Renamed {
		if n == name {
			return old
		}
	}
	return ""
}

// EnvOf is the variable of a setting: SIGNAGENT_ and its name in capitals
// (trusted-url: SIGNAGENT_TRUSTED_URL).
func EnvOf(name string) string {
	return "SIGNAGENT_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// SayRenamed writes the one line that says an old spelling was used and
// names the new one.
func SayRenamed(w io.Writer, old, now string) {
	fmt.Fprintf(w, "signagent: `%s` is now `%s`; the old name goes in the next release\n", old, now)
}

// renamedKeys takes the old keys out of m (a context's settings or the
// top of the file), each under its new name unless that is given too
// (the new one wins), and returns the old keys met.
func renamedKeys(m map[string]any, lines map[string]int) []string {
	var met []string
	for old, now := range Renamed {
		v, ok := m[old]
		if !ok {
			continue
		}
		met = append(met, old)
		if _, both := m[now]; !both {
			m[now], lines[now] = v, lines[old]
		}
		delete(m, old)
		delete(lines, old)
	}
	return met
}

// SayRenamedKeys writes a line for each old key the file holds (once each,
// wherever in the file).
func (f *File) SayRenamedKeys(w io.Writer) {
	for _, old := range f.Renamed {
		SayRenamed(w, old+" (in "+f.Path+")", Renamed[old])
	}
}
