// Package legacy is the service's legacy scheme: the
// `Authorization: ServiceAuth ...` header and its parser (header.go), the
// client of Authenticate (V3) by password, by certificate (the service's
// challenge opened on the token) and by auth.sid (client.go), the token
// cache per identity, in memory and in a shared store, one login at a time
// (tokens.go), and the scheme as an authz.Scheme (scheme.go), built for
// the agent and the CLI by package schemes.
package legacy

import (
	"errors"
	"fmt"
	"strings"
)

// HeaderScheme is the header's scheme name.
const HeaderScheme = "ServiceAuth"

// ErrHeader is returned for a header that is not the legacy scheme's.
var ErrHeader = errors.New("not a ServiceAuth header")

// Header is the Authorization value of a business call, byte for byte:
// the scheme, one space, the developer key and the token, joined by a
// comma with no space, neither quoted nor escaped (the token is base64
// and may end in '=').
func Header(developerKey, token string) string {
	return HeaderScheme + " ddauth_api_client_id=" + developerKey + ",ddauth_token=" + token
}

// AuthenticateHeader is the Authorization value while authenticating:
// the developer key alone.
func AuthenticateHeader(developerKey string) string {
	return HeaderScheme + " ddauth_api_client_id=" + developerKey
}

// ParseHeader reads a ServiceAuth header (the service's side, and the
// emulator's): each pair is split at its first '=' only, since a token may
// end in '='. token is empty when the header carries the key alone.
func ParseHeader(v string) (developerKey, token string, err error) {
	rest, ok := strings.CutPrefix(v, HeaderScheme+" ")
	if !ok {
		return "", "", fmt.Errorf("%w: want %q, one space, then the parameters", ErrHeader, HeaderScheme)
	}
	seen := map[string]bool{}
	for _, pair := range strings.Split(rest, ",") {
		name, value, ok := strings.Cut(pair, "=")
		if !ok || value == "" || seen[name] {
			return "", "", fmt.Errorf("%w: a parameter is empty, repeated or has no '='", ErrHeader)
		}
		seen[name] = true
		switch name {
		case "ddauth_api_client_id":
			developerKey = value
		case "ddauth_token":
			token = value
		default:
			return "", "", fmt.Errorf("%w: unknown parameter %q", ErrHeader, name)
		}
	}
	if developerKey == "" {
		return "", "", fmt.Errorf("%w: no ddauth_api_client_id", ErrHeader)
	}
	return developerKey, token, nil
}
