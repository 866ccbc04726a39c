// Package canonical builds the text that a trusted system signs for the
// service's authenticate-by-truster step, and normalizes the credentials and
// timestamps that go into it.
//
// One normalized credential string is used everywhere: in the signed text, in
// the query string of step 1 and as the id of step 2. Credential.Value is that
// string.
package canonical

import (
	"crypto/sha1"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/signagent/signagent/errdefs"
)

// Kind is the kind of identification object a credential is.
type Kind int

const (
	// Thumbprint is a SHA-1 certificate thumbprint: 40 hex digits, upper case.
	Thumbprint Kind = iota + 1
	// Phone is a 10-digit phone number.
	Phone
	// SNILS is an 11-digit insurance number with its check number.
	SNILS
)

// String returns the wire name of the kind: the query parameter name that
// carries the credential.
func (k Kind) String() string {
	switch k {
	case Thumbprint:
		return "thumbprint"
	case Phone:
		return "phone"
	case SNILS:
		return "snils"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// ParseKind returns the kind whose wire name is s.
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(s) {
	case "thumbprint":
		return Thumbprint, nil
	case "phone":
		return Phone, nil
	case "snils":
		return SNILS, nil
	}
	return 0, fmt.Errorf("%w: unknown credential kind %q (want phone, snils or thumbprint)", ErrInvalidCredential, s)
}

// Credential is a normalized identification object.
type Credential struct {
	Kind  Kind
	Value string
}

// String returns the normalized value.
func (c Credential) String() string { return c.Value }

// Masked returns the credential with most of its digits hidden, for logs.
func (c Credential) Masked() string { return c.Kind.String() + "=" + MaskTail(c.Value) }

// MaskTail hides all but the last four characters of a credential's value
// (all of a shorter one): how logs and errors show a phone, a SNILS or a
// thumbprint.
func MaskTail(v string) string {
	if len(v) <= 4 {
		return strings.Repeat("*", len(v))
	}
	return strings.Repeat("*", len(v)-4) + v[len(v)-4:]
}

// ErrInvalidCredential is wrapped by every credential parsing error.
var ErrInvalidCredential = errdefs.New(errdefs.ErrInvalidInput, "invalid credential")

// ErrSNILSChecksum is returned, wrapped, when a SNILS check number is wrong.
var ErrSNILSChecksum = errors.New("SNILS check number is wrong")

// Options changes how credentials are validated.
type Options struct {
	// AllowLegacySNILS accepts an 11-digit SNILS whose check number does not
	// follow the published rule (some numbers issued long ago do not).
	AllowLegacySNILS bool
}

// Parse normalizes s as a credential of the given kind.
func Parse(kind Kind, s string, opts Options) (Credential, error) {
	switch kind {
	case Thumbprint:
		return ParseThumbprint(s)
	case Phone:
		return ParsePhone(s)
	case SNILS:
		return ParseSNILS(s, opts)
	}
	return Credential{}, fmt.Errorf("%w: unknown credential kind", ErrInvalidCredential)
}

// ParseOne normalizes the one credential of the three given (the others
// empty), as an API request or a Signagent-Identity header names a trusted
// user.
func ParseOne(phone, snils, thumbprint string, opts Options) (Credential, error) {
	var kinds []Kind
	var value string
	for _, f := range []struct {
		k Kind
		v string
	}{{Phone, phone}, {SNILS, snils}, {Thumbprint, thumbprint}} {
		if f.v != "" {
			kinds = append(kinds, f.k)
			value = f.v
		}
	}
	if len(kinds) != 1 {
		return Credential{}, fmt.Errorf("%w: give exactly one of phone, snils or thumbprint", ErrInvalidCredential)
	}
	return Parse(kinds[0], value, opts)
}

// ParseThumbprint accepts 40 hex digits in any case, optionally with spaces
// or colons between bytes, and normalizes them to upper case with no
// separators.
func ParseThumbprint(s string) (Credential, error) {
	var b strings.Builder
	for _, r := range strings.TrimSpace(s) {
		switch {
		case r == ' ' || r == ':':
			continue
		case r >= '0' && r <= '9', r >= 'A' && r <= 'F':
			b.WriteRune(r)
		case r >= 'a' && r <= 'f':
			b.WriteRune(r - 'a' + 'A')
		default:
			return Credential{}, fmt.Errorf("%w: thumbprint has a character that is not a hex digit: %q", ErrInvalidCredential, r)
		}
	}
	if b.Len() != 40 {
		return Credential{}, fmt.Errorf("%w: thumbprint has %d hex digits, want 40 (a SHA-1 certificate thumbprint)", ErrInvalidCredential, b.Len())
	}
	return Credential{Kind: Thumbprint, Value: b.String()}, nil
}

// ParsePhone accepts a 10-digit number, optionally preceded by +7, 7 or 8,
// with spaces, dashes and parentheses anywhere, and normalizes it to the 10
// digits.
func ParsePhone(s string) (Credential, error) {
	t := strings.TrimSpace(s)
	plus := strings.HasPrefix(t, "+")
	if plus {
		t = t[1:]
	}
	digits, err := digitsOnly(t, "phone", " -()")
	if err != nil {
		return Credential{}, err
	}
	switch {
	case plus && (len(digits) != 11 || digits[0] != '7'):
		return Credential{}, fmt.Errorf("%w: phone with a + must be +7 followed by 10 digits", ErrInvalidCredential)
	case len(digits) == 11 && (digits[0] == '7' || digits[0] == '8'):
		digits = digits[1:]
	case len(digits) != 10:
		return Credential{}, fmt.Errorf("%w: phone has %d digits, want 10 (optionally after +7, 7 or 8)", ErrInvalidCredential, len(digits))
	}
	return Credential{Kind: Phone, Value: digits}, nil
}

// ParseSNILS accepts 11 digits, plain or as XXX-XXX-XXX YY, and checks the
// check number unless opts.AllowLegacySNILS is set.
func ParseSNILS(s string, opts Options) (Credential, error) {
	digits, err := digitsOnly(strings.TrimSpace(s), "SNILS", " -")
	if err != nil {
		return Credential{}, err
	}
	if len(digits) != 11 {
		return Credential{}, fmt.Errorf("%w: SNILS has %d digits, want 11", ErrInvalidCredential, len(digits))
	}
	if !opts.AllowLegacySNILS {
		want := SNILSCheck(digits[:9])
		got := digits[9:]
		if want != got {
			return Credential{}, fmt.Errorf("%w: %w: it ends in %s, the rule gives %s (numbers issued before the rule need the legacy-SNILS override)", ErrInvalidCredential, ErrSNILSChecksum, got, want)
		}
	}
	return Credential{Kind: SNILS, Value: digits}, nil
}

// SNILSCheck returns the two-digit check number of the 9-digit SNILS body by
// the published rule: each digit times its weight (9 for the first down to 1
// for the last), summed; a sum under 100 is the check number, 100 and 101 give
// 00, a larger sum is taken modulo 101 and then treated the same way.
func SNILSCheck(body string) string {
	sum := 0
	for i := 0; i < len(body) && i < 9; i++ {
		sum += int(body[i]-'0') * (9 - i)
	}
	if sum > 101 {
		sum %= 101
	}
	if sum == 100 || sum == 101 {
		sum = 0
	}
	return fmt.Sprintf("%02d", sum)
}

func digitsOnly(s, what, separators string) (string, error) {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			b.WriteRune(r)
		case strings.ContainsRune(separators, r):
		default:
			return "", fmt.Errorf("%w: %s has a character that is not a digit: %q", ErrInvalidCredential, what, r)
		}
	}
	return b.String(), nil
}

// ThumbprintOf is the SHA-1 of the certificate's DER in upper-case hex:
// the form the service's thumbprint credential takes, and how every part
// of signagent names a certificate.
func ThumbprintOf(c *x509.Certificate) string {
	sum := sha1.Sum(c.Raw)
	return strings.ToUpper(hex.EncodeToString(sum[:]))
}
