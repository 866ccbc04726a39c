package authz

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

// The schemes a Selector names. SchemeTrusted is a legacy identity whose
// auth.sid comes from trusted authentication: Normalize turns it into
// SchemeLegacy with By "sid".
const (
	SchemeOIDC    = "oidc"
	SchemeLegacy  = "legacy"
	SchemeTrusted = "trusted"
)

// Credential names a trusted user as given: one of the three, not yet
// checked (canonical.Parse checks it).
type Credential struct {
	Phone, SNILS, Thumbprint string
}

// Selector says whose Authorization header a business call needs: one
// scheme and one identity within it. It is read once, from the
// Signagent-Identity header (ParseSelector), the JSON body of
// /v1/authorizations or the CLI's flags, and checked by Check; the
// schemes take it from there.
type Selector struct {
	Scheme        string
	Profile       string      // oidc: the token store's profile
	By            string      // legacy: password, certificate or sid
	Login         string      // legacy by password
	Sid           string      // legacy by sid, given by the caller (a secret: String never shows it)
	Credential    *Credential // legacy by sid from trusted authentication
	ServiceUserID string      // with Credential
}

// Normalize maps a trusted selector to what it means (legacy, by sid) and
// lower-cases the scheme and the way in.
func (s Selector) Normalize() Selector {
	s.Scheme = strings.ToLower(strings.TrimSpace(s.Scheme))
	s.By = strings.ToLower(strings.TrimSpace(s.By))
	if s.Scheme == SchemeTrusted {
		s.Scheme, s.By = SchemeLegacy, "sid"
	}
	return s
}

// Check refuses a selector whose fields do not fit its scheme, saying what
// the scheme needs; it never repeats a value. Its errors are of kind
// errdefs.ErrInvalidInput, their text without the kind's: the caller says
// where the selector came from. It checks the shape only:
// whether a login has a password, or a profile is signed in, is the
// scheme's to say.
func (s Selector) Check() error {
	bad := func(format string, args ...any) error {
		return errdefs.Mark(fmt.Errorf(format, args...), errdefs.ErrInvalidInput)
	}
	others := func(allowed ...string) error {
		set := map[string]bool{"profile": s.Profile != "", "by": s.By != "", "login": s.Login != "", "sid": s.Sid != "",
			"credential": s.Credential != nil, "serviceUserId": s.ServiceUserID != ""}
		for _, a := range allowed {
			delete(set, a)
		}
		var extra []string
		for _, k := range []string{"profile", "by", "login", "sid", "credential", "serviceUserId"} {
			if set[k] {
				extra = append(extra, k)
			}
		}
		if len(extra) > 0 {
			return bad("%s %s does not take %s", s.Scheme, s.By, strings.Join(extra, ", "))
		}
		return nil
	}
	switch s.Scheme {
	case SchemeLegacy:
	default:
		// OpenID Connect, and any other scheme: an identity is a profile
		// (whether the scheme is one the caller serves is Schemes' to say).
		if !schemeName.MatchString(s.Scheme) {
			return bad("scheme %q is not a scheme's name", httpx.Printable(s.Scheme, 32))
		}
		return others("profile")
	}
	switch s.By {
	case "password":
		if s.Login == "" {
			return bad("legacy by password needs login")
		}
		return others("by", "login")
	case "certificate":
		return others("by")
	case "sid":
		switch {
		case s.Sid != "" && s.Credential != nil:
			return bad("give sid or credential, not both")
		case s.Sid != "":
			return others("by", "sid")
		case s.Credential == nil || s.ServiceUserID == "":
			return bad("by sid needs sid, or credential and serviceUserId")
		}
		return others("by", "credential", "serviceUserId")
	}
	return bad("%q is not a way to authenticate: want password, certificate or sid", httpx.Printable(s.By, 32))
}

// schemeName is what a scheme's name may be.
var schemeName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// selectorUsage is the header's syntax, for error messages.
const selectorUsage = "; want oidc [profile=NAME] | trusted phone=N|snils=N|thumbprint=HEX serviceUserId=ID | legacy login=LOGIN | legacy certificate"

// ParseSelector reads the Signagent-Identity header's syntax:
//
//	oidc [profile=NAME]
//	trusted phone=N|snils=N|thumbprint=HEX serviceUserId=ID
//	legacy login=LOGIN
//	legacy certificate
//	NAME [profile=NAME]   (any other scheme)
//
// and returns the normalized, checked selector. The error names what is
// wrong without repeating the values (a selector may carry a credential).
func ParseSelector(text string) (Selector, error) {
	bad := func(why string) error {
		return errdefs.Mark(errors.New(why+selectorUsage), errdefs.ErrInvalidInput)
	}
	if strings.TrimSpace(text) == "" {
		return Selector{}, bad("missing")
	}
	if len(text) > 1024 || !utf8.ValidString(text) || strings.ContainsFunc(text, notPrintable) {
		return Selector{}, bad("too long or not printable")
	}
	words := strings.Fields(text)
	kv, flags := map[string]string{}, map[string]bool{}
	for _, w := range words[1:] {
		k, v, ok := strings.Cut(w, "=")
		if _, dup := kv[k]; dup || flags[k] {
			return Selector{}, bad(fmt.Sprintf("%q given twice", httpx.Printable(k, 32)))
		}
		if !ok {
			flags[k] = true
			continue
		}
		if v == "" {
			return Selector{}, bad(fmt.Sprintf("%q is empty", httpx.Printable(k, 32)))
		}
		kv[k] = v
	}
	sel, allowed, err := selectorOf(words[0], kv, flags)
	if err != nil {
		return Selector{}, bad(err.Error())
	}
	for k := range kv {
		if !strings.Contains(" "+allowed+" ", " "+k+" ") {
			return Selector{}, bad(fmt.Sprintf("%q is not a %s selector's key", httpx.Printable(k, 32), words[0]))
		}
	}
	sel = sel.Normalize()
	if err := sel.Check(); err != nil {
		return Selector{}, err
	}
	return sel, nil
}

// selectorOf maps the header's words to a selector, and the keys the
// scheme takes.
func selectorOf(scheme string, kv map[string]string, flags map[string]bool) (Selector, string, error) {
	switch scheme {
	case SchemeTrusted:
		if len(flags) > 0 || kv["serviceUserId"] == "" {
			return Selector{}, "", errors.New("trusted needs one credential and serviceUserId=ID")
		}
		cred := Credential{Phone: kv["phone"], SNILS: kv["snils"], Thumbprint: kv["thumbprint"]}
		return Selector{Scheme: SchemeTrusted, Credential: &cred, ServiceUserID: kv["serviceUserId"]},
			"phone snils thumbprint serviceUserId", nil
	case SchemeLegacy:
		switch {
		case len(kv) == 0 && len(flags) == 1 && flags["certificate"]:
			return Selector{Scheme: SchemeLegacy, By: "certificate"}, "", nil
		case len(flags) == 0 && kv["login"] != "":
			return Selector{Scheme: SchemeLegacy, By: "password", Login: kv["login"]}, "login", nil
		}
		return Selector{}, "", errors.New("legacy needs login=LOGIN or the word certificate")
	}
	// OpenID Connect, and any other scheme: NAME [profile=NAME].
	if !schemeName.MatchString(scheme) {
		return Selector{}, "", fmt.Errorf("%q is not a scheme's name", httpx.Printable(scheme, 32))
	}
	if len(flags) > 0 {
		return Selector{}, "", fmt.Errorf("%s takes only profile=NAME", scheme)
	}
	return Selector{Scheme: scheme, Profile: kv["profile"]}, "profile", nil
}

// notPrintable is a rune that has no place in a selector: control
// characters (C0, DEL, C1), format characters such as bidirectional
// overrides, and line or paragraph separators.
func notPrintable(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// Text is the selector in the Signagent-Identity header's syntax (what
// ParseSelector reads back as the same selector), for a client of the
// agent's proxy. It is false for what the header cannot name: an
// auth.sid the caller holds (a secret, never sent in a header) or a value
// with a space.
func (s Selector) Text() (string, bool) {
	s = s.Normalize()
	var words []string
	switch {
	case s.Scheme == SchemeLegacy && s.By == "certificate":
		words = []string{SchemeLegacy, "certificate"}
	case s.Scheme == SchemeLegacy && s.By == "password":
		words = []string{SchemeLegacy, "login=" + s.Login}
	case s.Scheme == SchemeLegacy && s.By == "sid" && s.Sid == "" && s.Credential != nil:
		words = []string{SchemeTrusted}
		for _, kv := range [][2]string{{"phone", s.Credential.Phone}, {"snils", s.Credential.SNILS}, {"thumbprint", s.Credential.Thumbprint}} {
			if kv[1] != "" {
				words = append(words, kv[0]+"="+kv[1])
			}
		}
		words = append(words, "serviceUserId="+s.ServiceUserID)
	case s.Scheme == SchemeLegacy:
		return "", false
	default:
		words = []string{s.Scheme}
		if s.Profile != "" {
			words = append(words, "profile="+s.Profile)
		}
	}
	for _, w := range words {
		if strings.ContainsFunc(w, unicode.IsSpace) || strings.HasSuffix(w, "=") {
			return "", false
		}
	}
	return strings.Join(words, " "), true
}

// OfRequest is the body of the agent's POST /v1/authorizations as the
// selector it means, normalized (Check is the caller's).
func OfRequest(req agentapi.AuthorizationRequest) Selector {
	sel := Selector{Scheme: req.Scheme, Profile: req.Profile, By: req.By, Login: req.Login, Sid: req.Sid, ServiceUserID: req.ServiceUserID}
	if req.Credential != nil {
		c := Credential(*req.Credential)
		sel.Credential = &c
	}
	return sel.Normalize()
}
