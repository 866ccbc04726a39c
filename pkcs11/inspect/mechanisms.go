package inspect

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	p11 "github.com/miekg/pkcs11"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gostkeyx"
	"github.com/signagent/signagent/pkcs11/gostmech"
)

// Mechanism is one mechanism the token offers, with C_GetMechanismInfo's
// key sizes and what it may be used for.
type Mechanism struct {
	Code       uint     `json:"code"`
	Name       string   `json:"name"`
	MinKeySize uint     `json:"minKeySize"`
	MaxKeySize uint     `json:"maxKeySize"`
	Flags      []string `json:"flags"`
	// CKF is the CKF_ bits of Flags.
	CKF uint `json:"-"`
}

// Can says whether the mechanism may be used for a CKF_ use (CKF_SIGN, ...).
func (m Mechanism) Can(use uint) bool { return m.CKF&use != 0 }

// Mechanisms lists the mechanisms of the token, each with its
// C_GetMechanismInfo (a mechanism whose information the module will not
// give is listed with no flags).
func Mechanisms(ctx context.Context, t *pkcs11.Token) ([]Mechanism, error) {
	var out []Mechanism
	err := t.Read(ctx, "list the token's mechanisms", func(b pkcs11.Backend, slot uint) error {
		list, err := b.GetMechanismList(slot)
		if err != nil {
			return err
		}
		out = make([]Mechanism, 0, len(list))
		for _, m := range list {
			x := Mechanism{Code: m.Mechanism, Name: MechanismName(m.Mechanism), Flags: []string{}}
			if info, err := b.GetMechanismInfo(slot, []*p11.Mechanism{p11.NewMechanism(m.Mechanism, nil)}); err == nil {
				x.MinKeySize, x.MaxKeySize, x.CKF = info.MinKeySize, info.MaxKeySize, info.Flags
				x.Flags = mechanismFlags(info.Flags)
			}
			out = append(out, x)
		}
		slices.SortFunc(out, func(a, b Mechanism) int { return cmp.Compare(a.Code, b.Code) })
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

var mechanismNames = map[uint]string{
	p11.CKM_RSA_PKCS: "CKM_RSA_PKCS", p11.CKM_RSA_X_509: "CKM_RSA_X_509", p11.CKM_RSA_PKCS_OAEP: "CKM_RSA_PKCS_OAEP",
	p11.CKM_RSA_PKCS_PSS: "CKM_RSA_PKCS_PSS", p11.CKM_RSA_PKCS_KEY_PAIR_GEN: "CKM_RSA_PKCS_KEY_PAIR_GEN",
	p11.CKM_SHA1_RSA_PKCS: "CKM_SHA1_RSA_PKCS", p11.CKM_SHA256_RSA_PKCS: "CKM_SHA256_RSA_PKCS",
	p11.CKM_SHA384_RSA_PKCS: "CKM_SHA384_RSA_PKCS", p11.CKM_SHA512_RSA_PKCS: "CKM_SHA512_RSA_PKCS",
	p11.CKM_SHA256_RSA_PKCS_PSS: "CKM_SHA256_RSA_PKCS_PSS", p11.CKM_EC_KEY_PAIR_GEN: "CKM_EC_KEY_PAIR_GEN",
	p11.CKM_ECDSA: "CKM_ECDSA", p11.CKM_ECDSA_SHA1: "CKM_ECDSA_SHA1", p11.CKM_ECDSA_SHA256: "CKM_ECDSA_SHA256",
	p11.CKM_ECDSA_SHA384: "CKM_ECDSA_SHA384", p11.CKM_ECDSA_SHA512: "CKM_ECDSA_SHA512", p11.CKM_ECDH1_DERIVE: "CKM_ECDH1_DERIVE",
	p11.CKM_SHA_1: "CKM_SHA_1", p11.CKM_SHA256: "CKM_SHA256", p11.CKM_SHA384: "CKM_SHA384", p11.CKM_SHA512: "CKM_SHA512",
	p11.CKM_AES_KEY_GEN: "CKM_AES_KEY_GEN", p11.CKM_AES_CBC: "CKM_AES_CBC", p11.CKM_AES_CBC_PAD: "CKM_AES_CBC_PAD",
	p11.CKM_AES_ECB: "CKM_AES_ECB", p11.CKM_AES_GCM: "CKM_AES_GCM",
	p11.CKM_GOSTR3410_KEY_PAIR_GEN: "CKM_GOSTR3410_KEY_PAIR_GEN", gostmech.CKM_GOSTR3410: "CKM_GOSTR3410",
	gostmech.CKM_GOSTR3410_512: "CKM_GOSTR3410_512", gostmech.CKM_GOSTR3410_WITH_GOSTR3411_12_256: "CKM_GOSTR3410_WITH_GOSTR3411_12_256",
	gostmech.CKM_GOSTR3410_WITH_GOSTR3411_12_512: "CKM_GOSTR3410_WITH_GOSTR3411_12_512", gostmech.CKM_GOSTR3411_12_256: "CKM_GOSTR3411_12_256",
	gostmech.CKM_GOSTR3411_12_512: "CKM_GOSTR3411_12_512", gostkeyx.CKM_GOSTR3410_12_DERIVE: "CKM_GOSTR3410_12_DERIVE",
	p11.CKM_GOSTR3410_DERIVE: "CKM_GOSTR3410_DERIVE", gostkeyx.CKM_GOSTR3410_KEY_WRAP: "CKM_GOSTR3410_KEY_WRAP",
	gostkeyx.CKM_GOST28147: "CKM_GOST28147", gostkeyx.CKM_GOST28147_KEY_WRAP: "CKM_GOST28147_KEY_WRAP", p11.CKM_GOST28147_ECB: "CKM_GOST28147_ECB",
	gostkeyx.CKM_KDF_4357: "CKM_KDF_4357", p11.CKM_GOST28147_MAC: "CKM_GOST28147_MAC",
}

// MechanismName is a mechanism's CKM_ name, or its value in hex.
func MechanismName(m uint) string {
	if n, ok := mechanismNames[m]; ok {
		return n
	}
	return fmt.Sprintf("0x%08X", m)
}

func mechanismFlags(f uint) []string {
	out := []string{}
	for _, x := range []struct {
		bit  uint
		name string
	}{
		{p11.CKF_HW, "hardware"}, {p11.CKF_ENCRYPT, "encrypt"}, {p11.CKF_DECRYPT, "decrypt"}, {p11.CKF_DIGEST, "digest"},
		{p11.CKF_SIGN, "sign"}, {p11.CKF_VERIFY, "verify"}, {p11.CKF_GENERATE_KEY_PAIR, "generate-key-pair"},
		{p11.CKF_WRAP, "wrap"}, {p11.CKF_UNWRAP, "unwrap"}, {p11.CKF_DERIVE, "derive"},
	} {
		if f&x.bit != 0 {
			out = append(out, x.name)
		}
	}
	return out
}
