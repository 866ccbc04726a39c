package inspect_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/inspect"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/pkcs11/softhsm"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// TestPeekSelection: on a real SoftHSM token, without a login, the token
// and the key's certificate PeekSelection reads are the ones Open chooses
// (SoftHSM's spare uninitialized slot is not a token to choose); a
// selection that matches no token, or not in its slot, fails naming what
// was looked for; a key named wrongly, not named among several, or
// without a certificate leaves the token found and says why there is no
// certificate.
func TestPeekSelection(t *testing.T) {
	tk := pkcs11test.NewWith(t, pkcs11test.Options{Extra: []softhsm.KeySpec{
		{Type: softhsm.P256, Label: "expired", ID: []byte{0x12}, NotBefore: time.Now().AddDate(-2, 0, 0), NotAfter: time.Now().AddDate(-1, 0, 0)},
		{Type: softhsm.P256, Label: "nocert", ID: []byte{0x13}, NoCert: true},
	}})
	ctx := context.Background()
	for _, label := range []string{"rsa", "ec", "expired"} {
		t.Run(label, func(t *testing.T) {
			k := tk.Open(t, label)
			for _, sel := range []pkcs11.Selection{tk.Selection(label), {Module: tk.Module, KeyLabel: label}} {
				p, err := inspect.PeekSelection(ctx, sel)
				if err != nil {
					t.Fatal(err)
				}
				if p.Token.Slot != k.Token().Info().Slot || p.Token.Label != tk.Label || p.Token.Serial != tk.Serial {
					t.Errorf("token %+v, Open chose %+v", p.Token, k.Token())
				}
				if p.CertErr != nil || !p.Cert.Equal(k.Certificate()) {
					t.Errorf("certificate %v (%v), Open found %s", p.Cert, p.CertErr, k.Certificate().Subject)
				}
			}
		})
	}

	p, err := inspect.PeekSelection(ctx, tk.Selection("rsa"))
	if err != nil {
		t.Fatal(err)
	}
	slot := p.Token.Slot
	for _, tc := range []struct {
		name string
		sel  tokeninfo.TokenSelector
		want string
	}{
		{"no such label", tokeninfo.TokenSelector{Label: "nope"}, `token "nope" is not there; the module sees "` + tk.Label + `"`},
		{"no such serial", tokeninfo.TokenSelector{Serial: "0000"}, `token with serial "0000" is not there`},
		{"another slot", tokeninfo.TokenSelector{Label: tk.Label, Slot: slot + 1, HasSlot: true}, `token "` + tk.Label + `" in slot`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel := tk.Selection("rsa")
			sel.Token = tc.sel
			_, err := inspect.PeekSelection(ctx, sel)
			if !errors.Is(err, tokenerr.ErrTokenNotFound) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want ErrTokenNotFound with %q", err, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		key  string
		want error
		text string
	}{
		{"absent", tokenerr.ErrKeyNotFound, `no public key labelled "absent" on token`},
		{"", tokenerr.ErrKeyAmbiguous, "choose the key with --key-label or --key-id"},
		{"nocert", tokenerr.ErrCertNotFound, `no certificate with id 13 or label "nocert"`},
	} {
		t.Run("key "+tc.key, func(t *testing.T) {
			p, err := inspect.PeekSelection(ctx, tk.Selection(tc.key))
			if err != nil || p.Token.Label != tk.Label {
				t.Fatalf("token %+v: %v", p.Token, err)
			}
			if p.Cert != nil || !errors.Is(p.CertErr, tc.want) || !strings.Contains(p.CertErr.Error(), tc.text) {
				t.Fatalf("certificate %v, %v; want %v with %q", p.Cert, p.CertErr, tc.want, tc.text)
			}
		})
	}
}
