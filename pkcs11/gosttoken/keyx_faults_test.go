package gosttoken

import (
	"encoding/hex"
	"strings"
	"testing"
)

// TestKeyxFaults: each fault of the key agreement side gives its documented
// return value at its call, and every path still destroys what it made.
func TestKeyxFaults(t *testing.T) {
	want, _ := hex.DecodeString(katPlain)
	e := katEnvelope(t)
	tok := fixtureToken(t, 256, Options{})
	one := fixtureToken(t, 256, Options{OneStepUnwrap: true})
	a1, a2, b := e.pathA("a1"), e.pathA("a2"), e.pathB("-")
	for _, tc := range []struct {
		fault    string
		one      bool     // on the one-step build
		args     []string // the run
		call, rv string   // the call that fails, its return value ("": the run opens the envelope)
		unlisted string   // a mechanism the fault takes off the list
	}{
		{"no-derive", false, a2, "C_DeriveKey", rvMechanismInvalid, mechDerive},
		{"no-kdf4357", false, a2, "C_DeriveKey", rvMechanismInvalid, mechKDF4357},
		{"no-kdf4357", false, a1, "", "", ""},
		{"kdf=2012-256", false, a1, "C_DeriveKey", rvMechanismParamInvalid, ""},
		{"kdf=2012-256", false, a2, "", "", ""},
		{"kdf=4357", false, a2, "C_DeriveKey", rvMechanismParamInvalid, ""},
		{"kdf=4357", false, a1, "", "", ""},
		{"kdf=2012-256,4357", false, a1, "", "", ""},
		{"kdf=none", false, a1, "C_DeriveKey", rvMechanismParamInvalid, ""},
		{"kdf=none", false, a2, "C_DeriveKey", rvMechanismParamInvalid, ""},
		{"bad-mac", false, a2, "C_UnwrapKey", rvWrappedKeyInvalid, ""},
		{"bad-mac", true, b, "C_UnwrapKey", rvWrappedKeyInvalid, ""},
		{"no-unwrap-mechanism", false, a2, "C_UnwrapKey", rvMechanismInvalid, mechKeyWrap},
		{"no-unwrap-mechanism", true, b, "C_UnwrapKey", rvMechanismInvalid, mechOneStep},
		{"no-decrypt", false, a1, "C_DecryptInit", rvMechanismInvalid, mechDecrypt},
		{"no-decrypt", true, b, "C_DecryptInit", rvMechanismInvalid, mechDecrypt},
		{"decrypt-fail", false, a2, "C_Decrypt", rvDeviceError, ""},
		{"no-derive-attr", false, a2, "C_DeriveKey", rvKeyFunctionNotAllowed, ""},
	} {
		tk := tok
		if tc.one {
			tk = one
		}
		if err := tk.SetFaults(tc.fault); err != nil {
			t.Fatal(err)
		}
		r := drive(t, tk, tc.args...)
		switch {
		case tc.rv == "":
			opens(t, r, want)
		case r.exit != 1 || r.rv(tc.call) != tc.rv || r.plain != nil:
			t.Errorf("%s, %s: %s answered %q, want %s (exit %d):\n%s", tc.fault, tc.args[0], tc.call, r.rv(tc.call), tc.rv, r.exit, r.out)
		default:
			r.clean(t)
		}
		if tc.unlisted != "" {
			if m := drive(t, tk, "mechs"); strings.Contains(m.out, "mech "+tc.unlisted+" ") {
				t.Errorf("%s: %s still listed", tc.fault, tc.unlisted)
			}
		}
		if tc.fault == "no-derive-attr" {
			if m := drive(t, tk, "mechs"); m.values["private"] != "derive=0 unwrap=0" {
				t.Errorf("no-derive-attr: private key %s", m.values["private"])
			}
		}
		if err := tk.SetFaults(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKeyxBadInput: each bad parameter, template or wrapped key is refused
// with its return value, and nothing made stays alive.
func TestKeyxBadInput(t *testing.T) {
	e := katEnvelope(t)
	tok := fixtureToken(t, 256, Options{})
	one := fixtureToken(t, 256, Options{OneStepUnwrap: true})
	change := func(b []byte, i int) []byte {
		c := append([]byte(nil), b...)
		c[i] ^= 1
		return c
	}
	off := e
	off.eph = change(e.eph, 40) // y changed: not on the curve
	big := e
	big.eph = []byte(strings.Repeat("\xff", 64)) // x, y beyond p
	long := e
	long.eph = append(append([]byte(nil), e.eph...), e.eph...) // a 512-bit key's length
	ukm7 := e
	ukm7.ukm = e.ukm[:7]
	unknown := e
	unknown.wrapSet, _ = hex.DecodeString("06072a850302021f09") // 1.2.643.2.2.31.9
	encChanged, macChanged := e, e
	encChanged.enc = change(e.enc, 5)
	macChanged.mac = change(e.mac, 0)
	trChanged, trLonger, trShorter := e, e, e
	trChanged.transport = change(e.transport, 10) // inside the wrapped key
	trLonger.transport = append(append([]byte(nil), e.transport...), 0)
	trShorter.transport = e.transport[:len(e.transport)-1]
	ukmOther := hx(change(e.ukm, 7))
	for _, tc := range []struct {
		name     string
		one      bool
		args     []string
		call, rv string
	}{
		{"ephemeral key off the curve", false, off.pathA("a2"), "C_DeriveKey", rvMechanismParamInvalid},
		{"ephemeral key beyond the field", false, big.pathA("a2"), "C_DeriveKey", rvMechanismParamInvalid},
		{"ephemeral key of the other size", false, long.pathA("a1"), "C_DeriveKey", rvMechanismParamInvalid},
		{"UKM of 7 bytes", false, ukm7.pathA("a2"), "C_DeriveKey", rvMechanismParamInvalid},
		{"unknown S-box OID", false, unknown.pathA("a2"), "C_DeriveKey", rvAttributeValueInvalid},
		{"CKA_TOKEN true", false, append([]string{"-token"}, e.pathA("a2")...), "C_DeriveKey", rvTemplateInconsistent},
		{"kdf CKD_NULL", false, append([]string{"-kdf", "1"}, e.pathA("a2")...), "C_DeriveKey", rvMechanismParamInvalid},
		{"changed wrapped key", false, encChanged.pathA("a2"), "C_UnwrapKey", rvWrappedKeyInvalid},
		{"changed MAC", false, macChanged.pathA("a1"), "C_UnwrapKey", rvWrappedKeyInvalid},
		{"one step: changed wrapped key", true, trChanged.pathB("-"), "C_UnwrapKey", rvWrappedKeyInvalid},
		{"one step: a byte more", true, trLonger.pathB("-"), "C_UnwrapKey", rvWrappedKeyInvalid},
		{"one step: a byte less", true, trShorter.pathB("-"), "C_UnwrapKey", rvWrappedKeyInvalid},
		{"one step: another UKM", true, e.pathB(ukmOther), "C_UnwrapKey", rvMechanismParamInvalid},
		{"one step: CKA_TOKEN true", true, append([]string{"-token"}, e.pathB("-")...), "", ""},
	} {
		tk := tok
		if tc.one {
			tk = one
		}
		r := drive(t, tk, tc.args...)
		if tc.rv == "" { // -token is the derive's template only: the one-step run opens
			want, _ := hex.DecodeString(katPlain)
			opens(t, r, want)
			continue
		}
		if r.exit != 1 || r.rv(tc.call) != tc.rv || r.plain != nil {
			t.Errorf("%s: %s answered %q, want %s (exit %d):\n%s", tc.name, tc.call, r.rv(tc.call), tc.rv, r.exit, r.out)
		}
		r.clean(t)
	}
}

// TestKeyxSessionKeysDie: keys left alive die with their session.
func TestKeyxSessionKeysDie(t *testing.T) {
	want, _ := hex.DecodeString(katPlain)
	tok := fixtureToken(t, 256, Options{})
	r := drive(t, tok, append([]string{"-keep"}, katEnvelope(t).pathA("a2")...)...)
	if r.exit != 0 || string(r.plain) != string(want) {
		t.Fatalf("exit %d:\n%s", r.exit, r.out)
	}
	if got := r.objects; len(got) != 4 || got[2] != 3 || got[3] != 0 {
		t.Errorf("objects %v, want 1 2 3 then 0 at C_CloseSession", got)
	}
}
