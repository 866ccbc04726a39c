package pkcs11

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"
)

func TestInspectCapabilities(t *testing.T) {
	f := newFakeToken(t)
	_, sel, _ := fakeSetup(t, f, "1234")
	k := openFake(t, sel)
	ctx := context.Background()
	mechs, err := k.Mechanisms(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(mechs) != 1 || mechs[0].Name != "CKM_RSA_PKCS" || !slices.Equal(mechs[0].Flags, []string{"decrypt", "sign"}) {
		t.Fatalf("mechanisms: %+v", mechs)
	}
	caps := k.Capabilities(mechs)
	if !caps[0].Allowed || !caps[0].Offered || caps[0].Why != "" || !caps[1].Allowed || !caps[1].Offered {
		t.Fatalf("capabilities with CKM_RSA_PKCS for both: %+v", caps)
	}

	// A module whose CKM_RSA_PKCS only signs, and that hashes itself.
	signOnly := []Mechanism{{Code: p11.CKM_RSA_PKCS, Name: "CKM_RSA_PKCS", flags: p11.CKF_SIGN}, {Code: p11.CKM_SHA256_RSA_PKCS, flags: p11.CKF_SIGN}}
	caps = k.Capabilities(signOnly)
	if caps[1].Offered || caps[1].Why != "the module has no CKM_RSA_PKCS decryption for this key" {
		t.Errorf("certificate login without decryption: %+v", caps[1])
	}
	if len(caps[0].Notes) != 1 || !strings.Contains(caps[0].Notes[0], "CKM_SHA256_RSA_PKCS") {
		t.Errorf("trusted authentication's notes: %q", caps[0].Notes)
	}
	caps = k.Capabilities(nil)
	if caps[0].Offered || caps[0].Why != "the module has no CKM_RSA_PKCS signing for this key" {
		t.Errorf("trusted authentication without mechanisms: %+v", caps[0])
	}

	if st, err := k.PINState(ctx); err != nil || st != (PINState{}) {
		t.Fatalf("PIN state %+v, %v", st, err)
	}
	f.set(func(f *fakeToken) { f.flags |= p11.CKF_USER_PIN_COUNT_LOW })
	if st, err := k.PINState(ctx); err != nil || !st.CountLow || st.FinalTry || st.Locked {
		t.Fatalf("PIN state after a wrong try %+v, %v", st, err)
	}
}

// InspectModule runs on real modules in cmd/signagent's token check tests.
func TestInspectMechanismName(t *testing.T) {
	if got := mechanismName(0x80001234); got != "0x80001234" {
		t.Errorf("unknown mechanism's name %q", got)
	}
	if got := mechanismName(CKM_GOSTR3410_12_DERIVE); got != "CKM_GOSTR3410_12_DERIVE" {
		t.Errorf("CKM_GOSTR3410_12_DERIVE's name %q", got)
	}
}

// TestInspectPresence: --removal's view of the card, on the fake (whose
// GetSlotInfo alone says the card is out, as OpenSC's does).
func TestInspectPresence(t *testing.T) {
	f := newFakeToken(t)
	_, sel, _ := fakeSetup(t, f, "1234")
	k := openFake(t, sel)
	ctx := context.Background()
	p, err := k.WatchPresence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k.Close()
	if f.count("Finalize") != 0 {
		t.Fatal("the module was finalized while the watch holds it")
	}
	if gone, how, err := p.Gone(ctx); gone || how != "" || err != nil {
		t.Fatalf("a card in: gone %v %q %v", gone, how, err)
	}
	if tok, back, err := p.Back(ctx); !back || err != nil || tok.Slot != fakeSlot || tok.Label != "fake" {
		t.Fatalf("a card in: back %v %+v %v", back, tok, err)
	}

	f.set(func(f *fakeToken) { f.absent = true })
	if gone, how, err := p.Gone(ctx); !gone || how != "slot 7: CKF_TOKEN_PRESENT cleared" || err != nil {
		t.Fatalf("a card out: gone %v %q %v", gone, how, err)
	}
	if _, back, err := p.Back(ctx); back || err != nil {
		t.Fatalf("a card out (C_GetSlotList still lists the slot): back %v %v", back, err)
	}
	f.set(func(f *fakeToken) { f.absent, f.always["GetSlotInfo"] = false, p11.Error(p11.CKR_GENERAL_ERROR) })
	if gone, how, err := p.Gone(ctx); !gone || how != "slot 7: C_GetSlotInfo answered CKR_GENERAL_ERROR" || err != nil {
		t.Fatalf("pcscd down: gone %v %q %v", gone, how, err)
	}
	if _, back, err := p.Back(ctx); back || err == nil {
		t.Fatalf("pcscd down: back %v %v, want an error to try again on", back, err)
	}
	f.set(func(f *fakeToken) { delete(f.always, "GetSlotInfo") })

	hang := make(chan struct{})
	defer close(hang)
	f.set(func(f *fakeToken) { f.hang["GetSlotInfo"] = hang })
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if gone, _, err := p.Gone(short); gone || !errors.Is(err, ErrTokenTimeout) {
		t.Fatalf("a module that does not answer: gone %v %v, want ErrTokenTimeout", gone, err)
	}
	p.Close()
}
