// Package gostkeyx is how a GOST certificate login opens the service's challenge (RFC 4490 key
// transport: VKO GOST R 34.10-2012, the CryptoPro key wrap with the KEK
// diversified as RFC 4357 section 6.5 says, GOST 28147-89 CFB) on the
// token, in one of two ways, chosen from the token's mechanisms:
//
//   - one step: C_UnwrapKey with CKM_GOSTR3410_KEY_WRAP on the private key
//     over the whole GostR3410-KeyTransport (PKCS#11's RFC 4490 mechanism);
//   - derive and unwrap: C_DeriveKey with CKM_GOSTR3410_12_DERIVE (VKO) on
//     the private key, the KEK diversified (a second C_DeriveKey with
//     CKM_KDF_4357, or the first one's kdf CKD_KDF_4357), C_UnwrapKey with
//     CKM_GOST28147_KEY_WRAP (the token checks the MAC).
//
// Either way the content is decrypted with CKM_GOST28147 under the
// unwrapped key, and every key made on the way is a session object
// destroyed before the call returns. Where a real card diversifies is not
// settled (docs/tokens.md): `signagent token check` tries each way the
// token offers on a challenge sealed to the token's own certificate.
//
// It holds the mechanisms, the ways and the calls of one way; package
// pkcs11 runs them in a session of the key's token (Key.OpenGOST).
package gostkeyx

import (
	"fmt"
	"slices"
	"strings"

	p11 "github.com/miekg/pkcs11"
)

// The TC26 mechanisms and kdfs the ways use (vendor base 0xD4321000),
// and PKCS#11's GOST 28147-89 and key wrap mechanisms.
const (
	CKM_GOSTR3410_12_DERIVE    = 0xD4321007                 // TC26's (vendor base 0xD4321000)
	CKM_GOSTR3410_KEY_WRAP     = p11.CKM_GOSTR3410_KEY_WRAP // 0x1203
	CKM_GOST28147              = p11.CKM_GOST28147          // 0x1222
	CKM_GOST28147_KEY_WRAP     = p11.CKM_GOST28147_KEY_WRAP // 0x1224
	CKM_KDF_4357               = 0xD4321025
	CKD_KDF_4357               = 0xD4321025 // the kdf of CK_GOSTR3410_DERIVE_PARAMS: VKO, then RFC 4357 6.5
	CKD_KDF_GOSTR3411_2012_256 = 0xD4321026 // VKO_GOSTR3410_2012_256: Streebog-256 of the point
)

// Way is how a GOST key opens a challenge on its token.
type Way int

const (
	// OneStep: CKM_GOSTR3410_KEY_WRAP.
	OneStep Way = iota + 1
	// DeriveKDF4357: VKO (CKD_KDF_GOSTR3411_2012_256), then CKM_KDF_4357.
	DeriveKDF4357
	// DeriveDiversified: VKO with the kdf CKD_KDF_4357 in one derive.
	DeriveDiversified
)

// Ways are the ways, in the order a key prefers them.
var Ways = []Way{OneStep, DeriveKDF4357, DeriveDiversified}

// String names the way, as logs and token check show it.
func (w Way) String() string {
	switch w {
	case OneStep:
		return "one step: C_UnwrapKey with CKM_GOSTR3410_KEY_WRAP"
	case DeriveKDF4357:
		return "derive and unwrap: CKM_GOSTR3410_12_DERIVE (kdf CKD_KDF_GOSTR3411_2012_256), diversified by CKM_KDF_4357, CKM_GOST28147_KEY_WRAP"
	case DeriveDiversified:
		return "derive and unwrap: CKM_GOSTR3410_12_DERIVE with kdf CKD_KDF_4357 (diversified in the derive), CKM_GOST28147_KEY_WRAP"
	}
	return "none"
}

// Short names the way in a word, for logs and reports.
func (w Way) Short() string {
	switch w {
	case OneStep:
		return "one-step"
	case DeriveKDF4357:
		return "derive+CKM_KDF_4357"
	case DeriveDiversified:
		return "derive(CKD_KDF_4357)"
	}
	return "none"
}

// MechanismUse is a mechanism and the CKF_ flag a use of it needs.
type MechanismUse struct{ Code, Flag uint }

// Needs lists the mechanisms the way uses and the flag each needs.
func (w Way) Needs() []MechanismUse {
	decrypt := MechanismUse{CKM_GOST28147, p11.CKF_DECRYPT}
	unwrap := MechanismUse{CKM_GOST28147_KEY_WRAP, p11.CKF_UNWRAP}
	derive := MechanismUse{CKM_GOSTR3410_12_DERIVE, p11.CKF_DERIVE}
	switch w {
	case OneStep:
		return []MechanismUse{{CKM_GOSTR3410_KEY_WRAP, p11.CKF_UNWRAP}, decrypt}
	case DeriveKDF4357:
		return []MechanismUse{derive, {CKM_KDF_4357, p11.CKF_DERIVE}, unwrap, decrypt}
	}
	return []MechanismUse{derive, unwrap, decrypt}
}

// loginMechanismNames names the mechanisms of the ways (Needs).
var loginMechanismNames = map[uint]string{
	CKM_GOSTR3410_12_DERIVE: "CKM_GOSTR3410_12_DERIVE", CKM_GOSTR3410_KEY_WRAP: "CKM_GOSTR3410_KEY_WRAP",
	CKM_GOST28147: "CKM_GOST28147", CKM_GOST28147_KEY_WRAP: "CKM_GOST28147_KEY_WRAP", CKM_KDF_4357: "CKM_KDF_4357",
}

// Offered lists the ways the token's mechanisms (code -> flags) and the
// key's attributes (CKA_DERIVE, CKA_UNWRAP) allow, in order of
// preference, or says why there is none.
func Offered(flags map[uint]uint, derive, unwrap bool, key string) ([]Way, string) {
	var ways []Way
	var missing []string
	for _, w := range Ways {
		ok := true
		for _, n := range w.Needs() {
			f, has := flags[n.Code]
			if !has || f&n.Flag == 0 {
				ok = false
				missing = append(missing, loginMechanismNames[n.Code])
			}
		}
		if ok {
			ways = append(ways, w)
		}
	}
	var why []string
	if ways != nil && ways[0] == OneStep && !unwrap {
		ways = ways[1:]
		why = append(why, fmt.Sprintf("key %q may not unwrap (CKA_UNWRAP is false)", key))
	}
	if len(ways) > 0 && ways[0] != OneStep && !derive {
		ways = nil
		why = append(why, fmt.Sprintf("key %q may not derive (CKA_DERIVE is false)", key))
	}
	if len(ways) == 0 {
		if len(why) == 0 {
			why = append(why, "it offers neither way (missing "+strings.Join(uniq(missing), ", ")+")")
		}
		return nil, strings.Join(why, "; ")
	}
	return ways, ""
}

func uniq(s []string) []string {
	var out []string
	for _, x := range s {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
