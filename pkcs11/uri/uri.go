// Package uri parses and writes RFC 7512 pkcs11: URIs, the way a key is
// named on the command line and in the configuration. It needs nothing of
// package pkcs11, which imports it.
package uri

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/signagent/signagent/pkcs11/tokenerr"
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

// Parse parses a pkcs11: URI. A URI carrying pin-value is refused: a PIN
// in a URI ends up in shell history, process listings and logs.
func Parse(s string) (*URI, error) {
	rest, ok := strings.CutPrefix(s, "pkcs11:")
	if !ok {
		return nil, fmt.Errorf("%w: it must start with \"pkcs11:\"", tokenerr.ErrBadURI)
	}
	path, query, _ := strings.Cut(rest, "?")
	u := &URI{}
	err := u.attrs(path, ";", "path", func(name, val string) (bool, error) {
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
		case "slot-id":
			n, err := strconv.ParseUint(val, 10, 32)
			if err != nil {
				return true, fmt.Errorf("%w: slot-id %q is not a decimal slot number", tokenerr.ErrBadURI, val)
			}
			u.SlotID, u.HasSlot = uint(n), true
		case "manufacturer", "model", "library-manufacturer", "library-description", "library-version", "slot-description", "slot-manufacturer":
			// Accepted and not used for selection.
		default:
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	err = u.attrs(query, "&", "query", func(name, val string) (bool, error) {
		switch name {
		case "module-path":
			u.ModulePath = val
		case "pin-source":
			u.PINSource = strings.TrimPrefix(val, "file:")
		case "module-name":
			if val == "" || strings.ContainsAny(val, "/\x00") {
				return true, fmt.Errorf("%w: module-name %q is not a module's name (a name like softhsm2, not a path: use module-path)", tokenerr.ErrBadURI, val)
			}
			u.ModuleName = val
		default:
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return u, nil
}

// attrs reads list, the URI's path (sep ";") or query (sep "&"), one
// name=value at a time, the value percent-decoded, and hands each to set,
// which says whether it knows the name. What is the same in both parts is
// here: pin-value is refused wherever it stands, and an unknown name is
// an error unless it is a vendor's (x-...), which is listed in u.Ignored.
func (u *URI) attrs(list, sep, part string, set func(name, val string) (bool, error)) error {
	if list == "" {
		return nil
	}
	for _, attr := range strings.Split(list, sep) {
		name, raw, ok := strings.Cut(attr, "=")
		if !ok {
			return fmt.Errorf("%w: %s attribute %q has no '='", tokenerr.ErrBadURI, part, attr)
		}
		val, err := url.PathUnescape(raw)
		if err != nil {
			return fmt.Errorf("%w: %s attribute %s is not percent-encoded correctly", tokenerr.ErrBadURI, part, name)
		}
		if name == "pin-value" {
			return fmt.Errorf("%w: it carries pin-value; give the PIN with SIGNAGENT_PIN, --pin-file or pin-source= instead", tokenerr.ErrBadURI)
		}
		known, err := set(name, val)
		switch {
		case err != nil:
			return err
		case known:
		case strings.HasPrefix(name, "x-"):
			u.Ignored = append(u.Ignored, name)
		default:
			return fmt.Errorf("%w: unknown %s attribute %q", tokenerr.ErrBadURI, part, name)
		}
	}
	return nil
}

// Object is the RFC 7512 URI of an object on the token labelled token
// with serial serial: the token by label and serial, the object by label and id, and its type ("private",
// "public", "cert"; none when empty), each value percent-encoded where
// RFC 7512 requires (the id always, byte by byte).
func Object(token, serial, typ, label string, id []byte) string {
	attrs := []string{"token=" + Escape([]byte(token)), "serial=" + Escape([]byte(serial))}
	if label != "" {
		attrs = append(attrs, "object="+Escape([]byte(label)))
	}
	if len(id) > 0 {
		var sb strings.Builder
		for _, c := range id {
			fmt.Fprintf(&sb, "%%%02X", c)
		}
		attrs = append(attrs, "id="+sb.String())
	}
	if typ != "" {
		attrs = append(attrs, "type="+typ)
	}
	return "pkcs11:" + strings.Join(attrs, ";")
}

// Escape percent-encodes what RFC 7512 does not allow in a path
// attribute's value (anything but unreserved characters and a few
// sub-delimiters).
func Escape(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~:[]@!$'()*+,=&", c) >= 0 {
			sb.WriteByte(c)
			continue
		}
		fmt.Fprintf(&sb, "%%%02X", c)
	}
	return sb.String()
}
