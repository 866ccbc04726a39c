package pkcs11

import (
	"fmt"
	"net/url"
	"strconv"
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
	ModuleName string // module-name= (query): a module registered with p11-kit
	PINSource  string // pin-source= (query): a file path or file: URI
	// SlotID, when HasSlot, is slot-id= (path): the slot the token is in.
	SlotID  uint
	HasSlot bool
	// Ignored lists the vendor attributes (x-...) the URI carries; RFC 7512
	// lets a consumer that does not know them ignore them.
	Ignored []string
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
			case "slot-id":
				n, err := strconv.ParseUint(val, 10, 32)
				if err != nil {
					return nil, fmt.Errorf("%w: slot-id %q is not a decimal slot number", ErrBadURI, val)
				}
				u.SlotID, u.HasSlot = uint(n), true
			case "manufacturer", "model", "library-manufacturer", "library-description", "library-version", "slot-description", "slot-manufacturer":
				// Accepted and not used for selection.
			default:
				if !strings.HasPrefix(name, "x-") {
					return nil, fmt.Errorf("%w: unknown path attribute %q", ErrBadURI, name)
				}
				u.Ignored = append(u.Ignored, name)
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
				if val == "" || strings.ContainsAny(val, "/\x00") {
					return nil, fmt.Errorf("%w: module-name %q is not a module's name (a name like softhsm2, not a path: use module-path)", ErrBadURI, val)
				}
				u.ModuleName = val
			default:
				if !strings.HasPrefix(name, "x-") {
					return nil, fmt.Errorf("%w: unknown query attribute %q", ErrBadURI, name)
				}
				u.Ignored = append(u.Ignored, name)
			}
		}
	}
	return u, nil
}
