package legacy

import "strings"

// The legacy scheme's wire, spelled here as the service reads it (wire
// notes, "Legacy header scheme") rather than borrowed from the client's
// legacy package: a server that shared the client's parser could not catch
// the client's mistakes in writing the header.
const (
	serviceAuthScheme = "ServiceAuth"
	paramDeveloperKey = "ddauth_api_client_id"
	paramToken        = "ddauth_token"
)

// serviceAuth is what an Authorization header of the legacy scheme names:
// the developer key, and the token (empty while authenticating).
type serviceAuth struct {
	key, token string
}

// parseServiceAuth reads `ServiceAuth ddauth_api_client_id=K[,ddauth_token=T]`
// strictly: the scheme, exactly one space, pairs joined by a comma with no
// space, each split at its first '=' (a base64 token may end in '='), no
// pair empty, unknown or repeated, and the key always there.
func parseServiceAuth(v string) (serviceAuth, bool) {
	rest, ok := strings.CutPrefix(v, serviceAuthScheme+" ")
	if !ok || rest == "" {
		return serviceAuth{}, false
	}
	var a serviceAuth
	seen := map[string]bool{}
	for _, pair := range strings.Split(rest, ",") {
		name, value, ok := strings.Cut(pair, "=")
		if !ok || value == "" || seen[name] {
			return serviceAuth{}, false
		}
		seen[name] = true
		switch name {
		case paramDeveloperKey:
			a.key = value
		case paramToken:
			a.token = value
		default:
			return serviceAuth{}, false
		}
	}
	return a, a.key != ""
}

// checkDeveloperKey is the emulator's rule for a configured developer key:
// a short opaque string of printable ASCII without white space or comma,
// so that it fits the header unquoted (keys seen in the wild: api-<guid>,
// testClient-<hex>). One trailing newline of a key file is dropped.
func checkDeveloperKey(key string) (string, string) {
	key = strings.TrimSuffix(strings.TrimSuffix(key, "\n"), "\r")
	switch {
	case key == "":
		return "", "the developer key is empty"
	case len(key) > 512:
		return "", "the developer key is longer than 512 bytes"
	case strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r == ',' || r > '~' }):
		return "", "the developer key holds white space, a comma or a character outside printable ASCII"
	}
	return key, ""
}

// HeaderPrefix starts a business call's Authorization of this scheme.
const HeaderPrefix = serviceAuthScheme + " "
