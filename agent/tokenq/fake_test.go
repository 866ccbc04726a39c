package tokenq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"

	"github.com/signagent/signagent/agent/tokenq"
	"github.com/signagent/signagent/pkcs11/pkcs11test/fake"
)

// TestPulledAndHungTokenOnTheFake: the agent's view of a card pulled out
// of its reader and of a module that stops answering, at a chosen moment.
// The fake Backend stands in for the card (SoftHSM can be made to lose its
// token, as TestTokenOutAndBack does, but not to hang in a call). Either
// way the token is seen not ready, signing says so at once, and the
// token is used again once it is back.
func TestPulledAndHungTokenOnTheFake(t *testing.T) {
	f := fake.New(t)
	_, sel, _ := f.Setup(t, "1234")
	m, err := tokenq.New(tokenq.Options{Open: opener(sel, nil), CheckEvery: 20 * time.Millisecond,
		BackoffFirst: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, OpenTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	content, ts := text()
	if _, _, err := m.Sign(context.Background(), content, ts); err != nil {
		t.Fatalf("a token in: %v", err)
	}

	// Pulled: the reader says the card is out, and the module no longer
	// reads the token.
	f.Set(func(f *fake.Backend) {
		f.Absent = true
		f.Always["GetTokenInfo"] = p11.Error(p11.CKR_TOKEN_NOT_PRESENT)
	})
	waitFor(t, "the pulled token to be seen gone", func() bool { return !m.State().Ready })
	if _, _, err := m.Sign(context.Background(), content, ts); !errors.Is(err, tokenq.ErrNotReady) {
		t.Fatalf("signing while the token is out: %v", err)
	}
	f.Set(func(f *fake.Backend) { f.Absent = false; delete(f.Always, "GetTokenInfo") })
	waitFor(t, "the token to be back", func() bool { return m.State().Ready })
	if _, _, err := m.Sign(context.Background(), content, ts); err != nil {
		t.Fatalf("after the token came back: %v", err)
	}

	// Hung: the module's next call to the reader never returns.
	hang := make(chan struct{})
	released := false
	release := func() {
		if !released {
			released = true
			close(hang)
		}
	}
	defer release()
	f.Set(func(f *fake.Backend) { f.Hang["GetSlotInfo"] = hang })
	waitFor(t, "the hung token to be seen not ready", func() bool { return !m.State().Ready })
	if _, _, err := m.Sign(context.Background(), content, ts); !errors.Is(err, tokenq.ErrNotReady) {
		t.Fatalf("signing while the module hangs: %v", err)
	}
	f.Set(func(f *fake.Backend) { delete(f.Hang, "GetSlotInfo") })
	release()
	waitFor(t, "the token to answer again", func() bool { return m.State().Ready })
	if _, _, err := m.Sign(context.Background(), content, ts); err != nil {
		t.Fatalf("after the module answered again: %v", err)
	}
}
