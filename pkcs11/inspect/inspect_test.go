package inspect_test

import (
	"context"
	"slices"
	"testing"

	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gostkeyx"
	"github.com/signagent/signagent/pkcs11/inspect"
	"github.com/signagent/signagent/pkcs11/pkcs11test/fake"
)

// The fake token stands in for a module whose flags change between two
// reads; InspectModule and ListObjects run on real modules in
// cmd/signagent's token check and keys tests.
func TestMechanismsAndPINState(t *testing.T) {
	f := fake.New(t)
	_, sel, _ := f.Setup(t, "1234")
	ctx := context.Background()
	k, err := pkcs11.Open(ctx, sel, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	mechs, err := inspect.Mechanisms(ctx, k.Token())
	if err != nil {
		t.Fatal(err)
	}
	if len(mechs) != 1 || mechs[0].Name != "CKM_RSA_PKCS" || !slices.Equal(mechs[0].Flags, []string{"decrypt", "sign"}) || !mechs[0].Can(p11.CKF_SIGN) {
		t.Fatalf("mechanisms: %+v", mechs)
	}
	if facts := inspect.Facts(k); facts.Type != "RSA" || facts.Bits != 2048 || !facts.Sign || !facts.Decrypt {
		t.Fatalf("facts: %+v", facts)
	}
	if st, err := inspect.ReadPINState(ctx, k.Token()); err != nil || st != (inspect.PINState{}) {
		t.Fatalf("PIN state %+v, %v", st, err)
	}
	f.Set(func(f *fake.Backend) { f.Flags |= p11.CKF_USER_PIN_COUNT_LOW })
	if st, err := inspect.ReadPINState(ctx, k.Token()); err != nil || !st.CountLow || st.FinalTry || st.Locked {
		t.Fatalf("PIN state after a wrong try %+v, %v", st, err)
	}
}

func TestMechanismName(t *testing.T) {
	if got := inspect.MechanismName(0x80001234); got != "0x80001234" {
		t.Errorf("unknown mechanism's name %q", got)
	}
	if got := inspect.MechanismName(gostkeyx.CKM_GOSTR3410_12_DERIVE); got != "CKM_GOSTR3410_12_DERIVE" {
		t.Errorf("CKM_GOSTR3410_12_DERIVE's name %q", got)
	}
}
