package pkcs11

import (
	"fmt"
	"net/url"
	"strings"
)

// URI is the part of an RFC 7512 pkcs11: URI that selects a key.
type URI struct {
	Token      string // token=
	Serial     string // serial=
	Object     string // object= (CKA_LABEL)
	ID         []byte // id= (CKA_ID, percent-encoded bytes)
	Type       string // type= (private, cert, ...), informational
	ModulePath string // module-path= (query)
	PINSource  string // pin-source= (query): a file path or file: URI
}

// ParseURI parses a pkcs11: URI. A URI carrying pin-value is refused: a PIN
// in a URI ends up in shell history, process listings and logs.
func ParseURI(s string) (*URI, error) {
	rest, ok := strings.CutPrefix(s, "pkcs11:")
	if !ok {
		return nil, fmt.Errorf("%w: it must start with \"pkcs11:\"", ErrBadURI)
	}
	path, query, _ := strings.Cut(rest, "?")
	u := &URI{}
	if path != "" {
		for _, attr := range strings.Split(path, ";") {
			name, raw, ok := strings.Cut(attr, "=")
			if !ok {
				return nil, fmt.Errorf("%w: path attribute %q has no '='", ErrBadURI, attr)
			}
			val, err := url.PathUnescape(raw)
			if err != nil {
				return nil, fmt.Errorf("%w: attribute %s is not percent-encoded correctly", ErrBadURI, name)
			}
			switch name {
			case "token":
				u.Token = val
			case "serial":
				u.Serial = val
			case "object":
				u.Object = val
			case "id":
				u.ID = []byte(val)
			case "type":
				u.Type = val
			case "pin-value":
				return nil, fmt.Errorf("%w: it carries pin-value; give the PIN with SIGNAGENT_PIN, --pin-file or pin-source= instead", ErrBadURI)
			case "manufacturer", "model", "library-manufacturer", "library-description", "library-version", "slot-description", "slot-manufacturer", "slot-id":
				// Accepted and not used for selection.
			default:
				return nil, fmt.Errorf("%w: unknown path attribute %q", ErrBadURI, name)
			}
		}
	}
	if query != "" {
		for _, attr := range strings.Split(query, "&") {
			name, raw, ok := strings.Cut(attr, "=")
			if !ok {
				return nil, fmt.Errorf("%w: query attribute %q has no '='", ErrBadURI, attr)
			}
			val, err := url.PathUnescape(raw)
			if err != nil {
				return nil, fmt.Errorf("%w: query attribute %s is not percent-encoded correctly", ErrBadURI, name)
			}
			switch name {
			case "module-path":
				u.ModulePath = val
			case "pin-source":
				u.PINSource = strings.TrimPrefix(val, "file:")
			case "pin-value":
				return nil, fmt.Errorf("%w: it carries pin-value; give the PIN with SIGNAGENT_PIN, --pin-file or pin-source= instead", ErrBadURI)
			case "module-name":
			default:
				return nil, fmt.Errorf("%w: unknown query attribute %q", ErrBadURI, name)
			}
		}
	}
	return u, nil
}
