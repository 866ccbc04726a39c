package pkcs11

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/internal/gost"
)

// This file is what `signagent token check` asks a module and a key: the
// library's own description, its slots, the mechanisms it offers and what
// each signagent function needs of them. Nothing here is private: no PIN,
// no key material, only what any user of the module may read.

// GOST mechanisms a certificate login with a GOST key uses (the service's
// GOST key transport: VKO key agreement, then the content key unwrapped
// and the content decrypted with GOST 28147-89; see gostkeyx.go).
// CKM_GOSTR3410_12_DERIVE is TC26's (vendor base 0xD4321000), the others
// PKCS#11's.
const (
	CKM_GOSTR3410_12_DERIVE = 0xD4321007
	CKM_GOSTR3410_KEY_WRAP  = p11.CKM_GOSTR3410_KEY_WRAP // 0x1203
	CKM_GOST28147           = p11.CKM_GOST28147          // 0x1222
	CKM_GOST28147_KEY_WRAP  = p11.CKM_GOST28147_KEY_WRAP // 0x1224
)

// LibraryInfo is the module's C_GetInfo.
type LibraryInfo struct {
	Path            string `json:"path"`
	Manufacturer    string `json:"manufacturer"`
	Description     string `json:"description"`
	CryptokiVersion string `json:"cryptokiVersion"`
	LibraryVersion  string `json:"libraryVersion"`
}

// SlotReport is one slot (C_GetSlotInfo) and its token, when one is present.
type SlotReport struct {
	ID           uint       `json:"id"`
	Description  string     `json:"description"`
	Manufacturer string     `json:"manufacturer"`
	TokenPresent bool       `json:"tokenPresent"`
	Removable    bool       `json:"removable"`
	Hardware     bool       `json:"hardware"`
	Token        *TokenInfo `json:"token,omitempty"`
}

// ModuleReport is what a module says about itself and its slots.
type ModuleReport struct {
	Library LibraryInfo  `json:"library"`
	Slots   []SlotReport `json:"slots"`
}

// InspectModule loads the module at path (once per process) and reads its
// library information and every slot, with or without a token, within ctx.
func InspectModule(ctx context.Context, path string) (*ModuleReport, error) {
	m, release, err := useModule(ctx, path)
	if err != nil {
		return nil, err
	}
	defer release()
	return call(ctx, m, func(b Backend) (*ModuleReport, error) {
		info, err := b.GetInfo()
		if err != nil {
			return nil, classify("read the module's information (C_GetInfo)", err)
		}
		r := &ModuleReport{Library: LibraryInfo{Path: path, Manufacturer: trimPad(info.ManufacturerID), Description: trimPad(info.LibraryDescription),
			CryptokiVersion: version(info.CryptokiVersion), LibraryVersion: version(info.LibraryVersion)}}
		slots, err := b.GetSlotList(false)
		if err != nil {
			return nil, classify("list the module's slots", err)
		}
		tokens, err := listTokens(b)
		if err != nil {
			return nil, err
		}
		for _, s := range slots {
			si, err := b.GetSlotInfo(s)
			if err != nil {
				return nil, classify(fmt.Sprintf("read slot %d", s), err)
			}
			sr := SlotReport{ID: s, Description: trimPad(si.SlotDescription), Manufacturer: trimPad(si.ManufacturerID),
				TokenPresent: si.Flags&p11.CKF_TOKEN_PRESENT != 0, Removable: si.Flags&p11.CKF_REMOVABLE_DEVICE != 0, Hardware: si.Flags&p11.CKF_HW_SLOT != 0}
			for i := range tokens {
				if tokens[i].Slot == s {
					sr.Token = &tokens[i]
				}
			}
			r.Slots = append(r.Slots, sr)
		}
		return r, nil
	}, nil)
}

func trimPad(s string) string { return strings.TrimRight(s, " \x00") }

func version(v p11.Version) string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Mechanism is one mechanism the token offers, with C_GetMechanismInfo's
// key sizes and what it may be used for.
type Mechanism struct {
	Code       uint     `json:"code"`
	Name       string   `json:"name"`
	MinKeySize uint     `json:"minKeySize"`
	MaxKeySize uint     `json:"maxKeySize"`
	Flags      []string `json:"flags"`

	flags uint
}

// Can says whether the mechanism may be used for a CKF_ use (CKF_SIGN, ...).
func (m Mechanism) Can(use uint) bool { return m.flags&use != 0 }

// Mechanisms lists the mechanisms of the key's token, each with its
// C_GetMechanismInfo (a mechanism whose information the module will not
// give is listed with no flags).
func (k *Key) Mechanisms(ctx context.Context) ([]Mechanism, error) {
	out, err := call(ctx, k.tok.mod, func(b Backend) ([]Mechanism, error) {
		list, err := b.GetMechanismList(k.tok.info.Slot)
		if err != nil {
			return nil, err
		}
		out := make([]Mechanism, 0, len(list))
		for _, m := range list {
			x := Mechanism{Code: m.Mechanism, Name: mechanismName(m.Mechanism), Flags: []string{}}
			if info, err := b.GetMechanismInfo(k.tok.info.Slot, []*p11.Mechanism{p11.NewMechanism(m.Mechanism, nil)}); err == nil {
				x.MinKeySize, x.MaxKeySize, x.flags = info.MinKeySize, info.MaxKeySize, info.Flags
				x.Flags = mechanismFlags(info.Flags)
			}
			out = append(out, x)
		}
		slices.SortFunc(out, func(a, b Mechanism) int { return cmp.Compare(a.Code, b.Code) })
		return out, nil
	}, nil)
	if err != nil {
		return nil, classify("list the token's mechanisms", err)
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
	p11.CKM_GOSTR3410_KEY_PAIR_GEN: "CKM_GOSTR3410_KEY_PAIR_GEN", CKM_GOSTR3410: "CKM_GOSTR3410",
	CKM_GOSTR3410_512: "CKM_GOSTR3410_512", CKM_GOSTR3410_WITH_GOSTR3411_12_256: "CKM_GOSTR3410_WITH_GOSTR3411_12_256",
	CKM_GOSTR3410_WITH_GOSTR3411_12_512: "CKM_GOSTR3410_WITH_GOSTR3411_12_512", CKM_GOSTR3411_12_256: "CKM_GOSTR3411_12_256",
	CKM_GOSTR3411_12_512: "CKM_GOSTR3411_12_512", CKM_GOSTR3410_12_DERIVE: "CKM_GOSTR3410_12_DERIVE",
	p11.CKM_GOSTR3410_DERIVE: "CKM_GOSTR3410_DERIVE", CKM_GOSTR3410_KEY_WRAP: "CKM_GOSTR3410_KEY_WRAP",
	CKM_GOST28147: "CKM_GOST28147", CKM_GOST28147_KEY_WRAP: "CKM_GOST28147_KEY_WRAP", p11.CKM_GOST28147_ECB: "CKM_GOST28147_ECB",
	CKM_KDF_4357: "CKM_KDF_4357", p11.CKM_GOST28147_MAC: "CKM_GOST28147_MAC",
}

// mechanismName is a mechanism's CKM_ name, or its value in hex.
func mechanismName(m uint) string {
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

// KeyFacts is what is public about the key: its type and size and what
// its attributes allow.
type KeyFacts struct {
	Label   string `json:"label"`
	ID      string `json:"id"` // hex
	Type    string `json:"type"`
	Bits    int    `json:"bits"`
	Curve   string `json:"curve,omitempty"`
	Sign    bool   `json:"sign"`    // CKA_SIGN
	Decrypt bool   `json:"decrypt"` // CKA_DECRYPT
}

// Facts describes the key.
func (k *Key) Facts() KeyFacts {
	f := KeyFacts{Label: k.label, ID: hex.EncodeToString(k.id), Sign: k.sign, Decrypt: k.decrypt}
	switch pub := k.pub.(type) {
	case *rsa.PublicKey:
		f.Type, f.Bits = "RSA", pub.N.BitLen()
	case *ecdsa.PublicKey:
		f.Type, f.Bits, f.Curve = "EC", pub.Curve.Params().BitSize, pub.Curve.Params().Name
	case *gost.PublicKey:
		f.Type, f.Bits, f.Curve = "GOST", pub.Curve.Bits, pub.Curve.Name
	}
	return f
}

// FindCertificate looks for the key's certificate as Open does (--cert,
// else the one on the token), for a key opened with NoCertificate: a
// check reports a key without a certificate rather than failing on it.
func (k *Key) FindCertificate(ctx context.Context) (*x509.Certificate, error) {
	if k.cert != nil {
		return k.cert, nil
	}
	sh, err := k.tok.session(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { k.tok.free <- sh }()
	if err := k.tok.findCert(ctx, sh, k); err != nil {
		return nil, err
	}
	return k.cert, nil
}

// PINState is what the token says of its user PIN's tries (PKCS#11 gives
// flags, not a count; many modules set none of them).
type PINState struct {
	CountLow bool `json:"countLow"` // CKF_USER_PIN_COUNT_LOW: a wrong PIN was entered since the last success
	FinalTry bool `json:"finalTry"` // CKF_USER_PIN_FINAL_TRY: one more wrong PIN locks it
	Locked   bool `json:"locked"`   // CKF_USER_PIN_LOCKED
}

// PINState reads the token's flags now (C_GetTokenInfo).
func (k *Key) PINState(ctx context.Context) (PINState, error) {
	ti, err := call(ctx, k.tok.mod, func(b Backend) (p11.TokenInfo, error) { return b.GetTokenInfo(k.tok.info.Slot) }, nil)
	if err != nil {
		return PINState{}, classify("read the token's flags", err)
	}
	return PINState{CountLow: ti.Flags&p11.CKF_USER_PIN_COUNT_LOW != 0, FinalTry: ti.Flags&p11.CKF_USER_PIN_FINAL_TRY != 0,
		Locked: ti.Flags&p11.CKF_USER_PIN_LOCKED != 0}, nil
}

// Function names signagent's uses of a key.
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
func (k *Key) Capabilities(mechs []Mechanism) []Capability {
	find := func(code, use uint) (Mechanism, bool) {
		for _, m := range mechs {
			if m.Code == code && m.Can(use) {
				return m, true
			}
		}
		return Mechanism{}, false
	}
	f := k.Facts()
	fits := func(m Mechanism) string {
		if m.MaxKeySize > 0 && (uint(f.Bits) < m.MinKeySize || uint(f.Bits) > m.MaxKeySize) {
			return fmt.Sprintf("the module's %s takes keys of %d to %d bits, this key has %d", m.Name, m.MinKeySize, m.MaxKeySize, f.Bits)
		}
		return ""
	}
	trusted := Capability{Function: FunctionTrusted, Allowed: k.sign}
	if !k.sign {
		trusted.Why = fmt.Sprintf("key %q may not sign (CKA_SIGN is false)", k.label)
	}
	offer := func(c *Capability, code, use uint, what string) {
		m, ok := find(code, use)
		switch {
		case !ok:
			c.Why = join(c.Why, fmt.Sprintf("the module has no %s %s for this key", mechanismName(code), what))
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
		if k.gost.hashed != 0 {
			trusted.Uses = fmt.Sprintf("%s: the token hashes (Streebog-%d) and signs", mechanismName(k.gost.hashed), k.gost.bits)
			offer(&trusted, k.gost.hashed, p11.CKF_SIGN, "signing")
		} else {
			trusted.Uses = fmt.Sprintf("%s on the token (C_Digest), then %s over the hash", mechanismName(k.gost.digest), mechanismName(k.gost.raw))
			offer(&trusted, k.gost.raw, p11.CKF_SIGN, "signing")
			offer(&trusted, k.gost.digest, p11.CKF_DIGEST, "digest")
		}
	}

	login := Capability{Function: FunctionCertLogin}
	switch f.Type {
	case "RSA":
		login.Allowed = k.decrypt
		login.Uses = "CKM_RSA_PKCS decryption (PKCS#1 v1.5 key transport)"
		if !k.decrypt {
			login.Why = fmt.Sprintf("key %q may not decrypt (CKA_DECRYPT is false)", k.label)
		}
		offer(&login, p11.CKM_RSA_PKCS, p11.CKF_DECRYPT, "decryption")
	case "EC":
		login.Why = "signagent's certificate login takes RSA keys only"
	case "GOST":
		// The ways the module lists; CKA_DERIVE and CKA_UNWRAP are read
		// when the key opens a challenge (token check tries each way).
		flags := map[uint]uint{}
		for _, m := range mechs {
			flags[m.Code] |= m.flags
		}
		login.Allowed = true
		ways, err := gostLoginOffered(flags, true, true, k.tok.info.Label, k.label)
		if err != nil {
			login.Why = err.Error()
		} else {
			login.Offered = true
			login.Uses = ways[0].String()
		}
		for _, w := range GOSTLoginWays {
			state := "offered"
			for _, n := range gostLoginNeeds(w) {
				if flags[n.code]&n.flag == 0 {
					state = "not offered (no " + mechanismName(n.code) + ")"
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

// Presence follows a key's token out of its reader and back, for `token
// check --removal`. It holds the module, so that the module stays
// initialized while the key is closed and the card is out, as an agent's
// would.
type Presence struct {
	m     *module
	token TokenInfo
}

// WatchPresence starts following the key's token; Close ends it.
func (k *Key) WatchPresence(ctx context.Context) (*Presence, error) {
	m, err := k.tok.mod.reg.acquire(ctx, k.tok.mod.path)
	if err != nil {
		return nil, err
	}
	return &Presence{m: m, token: k.tok.info}, nil
}

// Close releases the module (the last user finalizes it).
func (p *Presence) Close() { p.m.reg.release(p.m) }

// Gone asks the reader, through C_GetSlotInfo of the slot the token was
// in, whether the token is out, and if so how the module said it (the
// flag cleared, or the error it answered). C_GetSlotInfo is the call to
// ask: OpenSC answers C_GetTokenInfo from memory while the card is out,
// and C_GetSlotInfo fails with CKR_GENERAL_ERROR while pcscd is down or
// CKR_SLOT_ID_INVALID when the reader went away, which count as out too.
// A module that does not answer within ctx is an error.
func (p *Presence) Gone(ctx context.Context) (bool, string, error) {
	si, err := call(ctx, p.m, func(b Backend) (p11.SlotInfo, error) { return b.GetSlotInfo(p.token.Slot) }, nil)
	code, isCode := Code(err)
	switch {
	case isCode:
		return true, fmt.Sprintf("slot %d: C_GetSlotInfo answered %s", p.token.Slot, codeName(code)), nil
	case err != nil:
		return false, "", classify(fmt.Sprintf("read slot %d", p.token.Slot), err)
	case si.Flags&p11.CKF_TOKEN_PRESENT == 0:
		return true, fmt.Sprintf("slot %d: CKF_TOKEN_PRESENT cleared", p.token.Slot), nil
	}
	return false, "", nil
}

// Back looks for the token among those the module lists as present
// (C_GetSlotList(true)), by its label and serial: a card put back may be
// in another slot (another reader, or the driver numbering anew), so the
// slot it was in says nothing. Its slot's C_GetSlotInfo must say it is
// present. Errors of the module (pcscd still starting, a reader coming
// up) are returned for the caller to try again.
func (p *Presence) Back(ctx context.Context) (TokenInfo, bool, error) {
	type found struct {
		t  TokenInfo
		ok bool
	}
	f, err := call(ctx, p.m, func(b Backend) (found, error) {
		tokens, err := listTokens(b)
		if err != nil {
			return found{}, err
		}
		for _, t := range tokens {
			if t.Label != p.token.Label || t.Serial != p.token.Serial {
				continue
			}
			si, err := b.GetSlotInfo(t.Slot)
			if err != nil {
				return found{}, classify(fmt.Sprintf("read slot %d", t.Slot), err)
			}
			if si.Flags&p11.CKF_TOKEN_PRESENT != 0 {
				return found{t, true}, nil
			}
		}
		return found{}, nil
	}, nil)
	return f.t, f.ok, err
}
