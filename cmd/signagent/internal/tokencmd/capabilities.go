package tokencmd

import (
	"errors"
	"fmt"

	p11 "github.com/miekg/pkcs11"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gostkeyx"
	"github.com/signagent/signagent/pkcs11/inspect"
)

// Function names signagent's uses of a key (what `token check` and the
// doctor report a token able to do).
const (
	FunctionTrusted   = "trusted authentication"
	FunctionCertLogin = "certificate login"
)

// Capability is one signagent function as far as the module and the key's
// attributes allow it, before anything is tried.
type Capability struct {
	Function string `json:"function"`
	// Allowed: the key's type and attributes allow the function.
	Allowed bool `json:"allowed"`
	// Offered: the module has the mechanisms the function uses, for this
	// key's size.
	Offered bool `json:"offered"`
	// Uses names the mechanisms signagent would use, and how it hashes.
	Uses string `json:"uses,omitempty"`
	// Why says why the function is not available, when it is not.
	Why string `json:"why,omitempty"`
	// Notes are other relevant facts (a hashing mechanism signagent does
	// not use, the GOST mechanisms present).
	Notes []string `json:"notes,omitempty"`
}

// Capabilities says, for each signagent function, whether the key's
// attributes allow it and whether the module offers what it needs.
func Capabilities(k *pkcs11.Key, mechs []inspect.Mechanism) []Capability {
	find := func(code, use uint) (inspect.Mechanism, bool) {
		for _, m := range mechs {
			if m.Code == code && m.Can(use) {
				return m, true
			}
		}
		return inspect.Mechanism{}, false
	}
	f := inspect.Facts(k)
	label := k.Label()
	fits := func(m inspect.Mechanism) string {
		if m.MaxKeySize > 0 && (uint(f.Bits) < m.MinKeySize || uint(f.Bits) > m.MaxKeySize) {
			return fmt.Sprintf("the module's %s takes keys of %d to %d bits, this key has %d", m.Name, m.MinKeySize, m.MaxKeySize, f.Bits)
		}
		return ""
	}
	trusted := Capability{Function: FunctionTrusted, Allowed: f.Sign}
	if !f.Sign {
		trusted.Why = fmt.Sprintf("key %q may not sign (CKA_SIGN is false)", label)
	}
	offer := func(c *Capability, code, use uint, what string) {
		m, ok := find(code, use)
		switch {
		case !ok:
			c.Why = join(c.Why, fmt.Sprintf("the module has no %s %s for this key", inspect.MechanismName(code), what))
		default:
			c.Offered = true
			if why := fits(m); why != "" {
				// A note, not a refusal: some modules give the sizes in
				// bytes; the signature tried next says whether it works.
				c.Notes = append(c.Notes, why)
			}
		}
	}
	switch f.Type {
	case "RSA":
		trusted.Uses = "CKM_RSA_PKCS over a DigestInfo hashed by signagent (SHA-256)"
		offer(&trusted, p11.CKM_RSA_PKCS, p11.CKF_SIGN, "signing")
		if _, ok := find(p11.CKM_SHA256_RSA_PKCS, p11.CKF_SIGN); ok {
			trusted.Notes = append(trusted.Notes, "the module also hashes on the token (CKM_SHA256_RSA_PKCS); signagent does not need it")
		}
	case "EC":
		trusted.Uses = "CKM_ECDSA over a digest made by signagent (SHA-256)"
		offer(&trusted, p11.CKM_ECDSA, p11.CKF_SIGN, "signing")
	case "GOST":
		// Open chose the way (chooseGOST) or failed: hashing on the token
		// with the signature, else C_Digest then the raw mechanism.
		// Or, on a token with the raw mechanism alone, Streebog here.
		hashed, raw, digest := k.GOSTMechanisms()
		trusted.Uses = k.GOSTWay()
		switch {
		case hashed != 0:
			offer(&trusted, hashed, p11.CKF_SIGN, "signing")
		case digest == 0:
			offer(&trusted, raw, p11.CKF_SIGN, "signing")
		default:
			offer(&trusted, raw, p11.CKF_SIGN, "signing")
			offer(&trusted, digest, p11.CKF_DIGEST, "digest")
		}
	}

	login := Capability{Function: FunctionCertLogin}
	switch f.Type {
	case "RSA":
		login.Allowed = f.Decrypt
		login.Uses = "CKM_RSA_PKCS decryption (PKCS#1 v1.5 key transport)"
		if !f.Decrypt {
			login.Why = fmt.Sprintf("key %q may not decrypt (CKA_DECRYPT is false)", label)
		}
		offer(&login, p11.CKM_RSA_PKCS, p11.CKF_DECRYPT, "decryption")
	case "EC":
		login.Why = "signagent's certificate login takes RSA keys only"
	case "GOST":
		// The ways the module lists; CKA_DERIVE and CKA_UNWRAP are read
		// when the key opens a challenge (token check tries each way).
		flags := map[uint]uint{}
		for _, m := range mechs {
			flags[m.Code] |= m.CKF
		}
		login.Allowed = true
		ways, err := gostkeyx.LoginOffered(flags, true, true, k.Token().Info().Label, label)
		if errors.Is(err, gostkeyx.ErrNoKeyAgreement) {
			// Not a failure of the token: it does not do this at all.
			login.Allowed, login.Why = false, gostkeyx.NotOffered
			break
		}
		if err != nil {
			login.Why = err.Error()
		} else {
			login.Offered = true
			login.Uses = ways[0].String()
		}
		for _, w := range gostkeyx.Ways {
			state := "offered"
			for _, n := range w.Needs() {
				if flags[n.Code]&n.Flag == 0 {
					state = "not offered (no " + inspect.MechanismName(n.Code) + ")"
					break
				}
			}
			login.Notes = append(login.Notes, fmt.Sprintf("%s: %s", w.Short(), state))
		}
	}
	if login.Allowed && login.Offered {
		login.Why = ""
	}
	if trusted.Allowed && trusted.Offered {
		trusted.Why = ""
	}
	return []Capability{trusted, login}
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
