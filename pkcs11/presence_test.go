package pkcs11_test

import (
	"context"
	"errors"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"

	"github.com/signagent/signagent/pkcs11/pkcs11test/fake"
	"github.com/signagent/signagent/pkcs11/tokenerr"
)

// TestPresence: --removal's view of the card, on the fake (whose
// GetSlotInfo alone says the card is out, as OpenSC's does).
func TestPresence(t *testing.T) {
	f := fake.New(t)
	_, sel, _ := f.Setup(t, "1234")
	k := openFake(t, sel)
	ctx := context.Background()
	p, err := k.Token().WatchPresence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k.Close()
	if f.Count("Finalize") != 0 {
		t.Fatal("the module was finalized while the watch holds it")
	}
	if gone, how, err := p.Gone(ctx); gone || how != "" || err != nil {
		t.Fatalf("a card in: gone %v %q %v", gone, how, err)
	}
	if tok, back, err := p.Back(ctx); !back || err != nil || tok.Slot != fake.Slot || tok.Label != "fake" {
		t.Fatalf("a card in: back %v %+v %v", back, tok, err)
	}

	f.Set(func(f *fake.Backend) { f.Absent = true })
	if gone, how, err := p.Gone(ctx); !gone || how != "slot 7: CKF_TOKEN_PRESENT cleared" || err != nil {
		t.Fatalf("a card out: gone %v %q %v", gone, how, err)
	}
	if _, back, err := p.Back(ctx); back || err != nil {
		t.Fatalf("a card out (C_GetSlotList still lists the slot): back %v %v", back, err)
	}
	f.Set(func(f *fake.Backend) { f.Absent, f.Always["GetSlotInfo"] = false, p11.Error(p11.CKR_GENERAL_ERROR) })
	if gone, how, err := p.Gone(ctx); !gone || how != "slot 7: C_GetSlotInfo answered CKR_GENERAL_ERROR" || err != nil {
		t.Fatalf("pcscd down: gone %v %q %v", gone, how, err)
	}
	if _, back, err := p.Back(ctx); back || err == nil {
		t.Fatalf("pcscd down: back %v %v, want an error to try again on", back, err)
	}
	f.Set(func(f *fake.Backend) { delete(f.Always, "GetSlotInfo") })

	hang := make(chan struct{})
	defer close(hang)
	f.Set(func(f *fake.Backend) { f.Hang["GetSlotInfo"] = hang })
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if gone, _, err := p.Gone(short); gone || !errors.Is(err, tokenerr.ErrTokenTimeout) {
		t.Fatalf("a module that does not answer: gone %v %v, want tokenerr.ErrTokenTimeout", gone, err)
	}
	p.Close()
}
