package tokenq_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"

	"github.com/signagent/signagent/agent/tokenq"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
	"github.com/signagent/signagent/signer"
)

// opener opens the key sel names on the real SoftHSM token.
func opener(sel pkcs11.Selection, opens *int) tokenq.Opener {
	var mu sync.Mutex
	return func(ctx context.Context, want *pkcs11.Identity) (tokenq.Token, error) {
		if opens != nil {
			mu.Lock()
			*opens++
			mu.Unlock()
		}
		sel := sel
		sel.Expect = want
		k, err := pkcs11.Open(ctx, sel, zerolog.Nop())
		if err != nil {
			return nil, err
		}
		return k, nil
	}
}

func text() ([]byte, time.Time) {
	ts := canonical.Now()
	return canonical.Text("0f6c2e5b-9d4a-4c1e-8a2b-7e3d1f0a9b8c", canonical.Credential{Kind: canonical.Phone, Value: "9161234567"}, ts), ts
}

// waitFor polls cond for up to 10 s: a bound on waiting, not a timing
// assertion.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("gave up waiting for %s", what)
}

// A signature goes through the queue and verifies; the state names the key.
func TestSigns(t *testing.T) {
	tk := pkcs11test.New(t)
	m, err := tokenq.New(tokenq.Options{Open: opener(tk.Selection(tk.RSA.Label), nil), CheckEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if st := m.State(); !st.Ready || st.Thumbprint == "" {
		t.Fatalf("state %+v", st)
	}
	content, ts := text()
	der, cert, err := m.Sign(context.Background(), content, ts)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.Equal(tk.RSA.Cert) {
		t.Fatal("the certificate returned is not the key's")
	}
	if _, err := signer.Verify(der, content, nil); err != nil {
		t.Fatalf("the signature does not verify: %v", err)
	}
}

// A full queue answers at once; a request whose deadline passes while it
// waits is dropped, not signed later.
func TestQueueBounds(t *testing.T) {
	tk := pkcs11test.New(t)
	m, err := tokenq.New(tokenq.Options{Open: opener(tk.Selection(tk.RSA.Label), nil), CheckEvery: -1,
		Workers: 1, Backlog: 1, Delay: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	content, ts := text()
	var wg sync.WaitGroup
	for range 2 { // one signing, one waiting
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Sign(context.Background(), content, ts)
		}()
	}
	waitFor(t, "two requests in the queue", func() bool { return m.QueueDepth() == 2 })
	if _, _, err := m.Sign(context.Background(), content, ts); !errors.Is(err, tokenq.ErrQueueFull) {
		t.Fatalf("a third request: %v, want ErrQueueFull", err)
	}
	wg.Wait()

	// The deadline passes while the worker is busy with another request.
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.Sign(context.Background(), content, ts)
	}()
	waitFor(t, "a request in flight", func() bool { return m.QueueDepth() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, _, err = m.Sign(ctx, content, ts)
	if !errors.Is(err, tokenq.ErrExpired) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request past its deadline: %v", err)
	}
	wg.Wait()
	// The worker found it expired and dropped it rather than sign it.
	waitFor(t, "the expired request to be dropped", func() bool { return m.Dropped() == 1 })
}

// A token taken away is noticed by the watch, answered at once with
// ErrNotReady, and used again when it comes back.
func TestTokenOutAndBack(t *testing.T) {
	tk := pkcs11test.New(t)
	m, err := tokenq.New(tokenq.Options{Open: opener(tk.Selection(tk.RSA.Label), nil), CheckEvery: 20 * time.Millisecond,
		BackoffFirst: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, OpenTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tk.Remove(t)
	waitFor(t, "the token to be seen gone", func() bool { return !m.State().Ready })
	if st := m.State(); st.Reason == "" {
		t.Fatalf("a token out says why: %+v", st)
	}
	content, ts := text()
	if _, _, err := m.Sign(context.Background(), content, ts); !errors.Is(err, tokenq.ErrNotReady) {
		t.Fatalf("signing while the token is out: %v", err)
	}
	tk.Insert(t)
	waitFor(t, "the token to be back", func() bool { return m.State().Ready })
	if _, _, err := m.Sign(context.Background(), content, ts); err != nil {
		t.Fatalf("after the token came back: %v", err)
	}
}

// A PIN the token refuses is tried once: New fails and nothing retries it.
func TestWrongPINTriedOnce(t *testing.T) {
	tk := pkcs11test.New(t)
	sel := tk.Selection(tk.RSA.Label)
	sel.PIN.File = filepath.Join(t.TempDir(), "pin")
	if err := os.WriteFile(sel.PIN.File, []byte("000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var opens int
	_, err := tokenq.New(tokenq.Options{Open: opener(sel, &opens), BackoffFirst: time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "PIN") {
		t.Fatalf("err = %v", err)
	}
	time.Sleep(50 * time.Millisecond) // room for a retry that must not come
	if opens != 1 {
		t.Fatalf("opened %d times with a wrong PIN", opens)
	}
}

// An agent without a token has a nil manager: never ready, and what needs
// the token says so.
func TestNoToken(t *testing.T) {
	var m *tokenq.Manager
	if m.State().Ready {
		t.Fatal("a nil manager is ready")
	}
	content, ts := text()
	if _, _, err := m.Sign(context.Background(), content, ts); !errors.Is(err, tokenq.ErrNoToken) {
		t.Fatalf("Sign: %v", err)
	}
	if _, _, err := m.Decrypter(); !errors.Is(err, tokenq.ErrNoToken) {
		t.Fatalf("Decrypter: %v", err)
	}
}

// A login that fails without naming the PIN (CKR_GENERAL_ERROR from
// C_Login: OpenSC's answer when a card says 6985 to a wrong PIN) is not
// retried, at start or later: the card may have counted the try. The same
// code from a signature is a token gone wrong, and is retried.
func TestLoginFailureNotRetried(t *testing.T) {
	var opens atomic.Int32
	login := tokenerr.ClassifyLogin(`log in to token "card"`, p11.Error(p11.CKR_GENERAL_ERROR))
	open := func(context.Context, *pkcs11.Identity) (tokenq.Token, error) {
		opens.Add(1)
		return nil, login
	}
	m, err := tokenq.New(tokenq.Options{Open: open, BackoffFirst: time.Millisecond, BackoffMax: time.Millisecond, CheckEvery: -1})
	if err == nil {
		m.Close()
		time.Sleep(50 * time.Millisecond)
		t.Fatalf("started after a failed login (retried in the background: %d opens)", opens.Load())
	}
	if !errors.Is(err, tokenerr.ErrLoginFailed) || !strings.Contains(err.Error(), "not sent again") || opens.Load() != 1 {
		t.Fatalf("a failed login: %v after %d opens; want ErrLoginFailed, once", err, opens.Load())
	}
	if tokenerr.Recoverable(login) {
		t.Fatal("a failed login counts as recoverable")
	}
	for _, op := range []string{"sign", "check the token", "open a session"} {
		if !tokenerr.Recoverable(tokenerr.Classify(op, p11.Error(p11.CKR_GENERAL_ERROR))) {
			t.Fatalf("CKR_GENERAL_ERROR from %q is not recoverable", op)
		}
	}
}

// TestCardSwap: the agent's token is taken out and another of the same
// label put in its place (SoftHSM's token directory swapped, as a card in
// a reader). No PIN goes to the other token, nothing is signed with its
// key, the state says which token is in and which is wanted, in one line;
// and once the agent's own token is back it signs again. Two cards of one
// batch may share their serial (libcacard's do): then the key decides,
// after the login and before any signature.
func TestCardSwap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, tk, other *pkcs11test.Token)
		want    func(tk, other *pkcs11test.Token) string
	}{
		{"same label, other serial, other PIN", func(t *testing.T, tk, other *pkcs11test.Token) { other.SetPIN(t, "654321") },
			func(tk, other *pkcs11test.Token) string {
				return "a different token, serial " + other.Serial + ", is in the reader; this agent's is serial " + tk.Serial
			}},
		{"same label, other serial, same PIN", func(*testing.T, *pkcs11test.Token, *pkcs11test.Token) {},
			func(tk, other *pkcs11test.Token) string {
				return "a different token, serial " + other.Serial + ", is in the reader; this agent's is serial " + tk.Serial
			}},
		// Two cards of one serial (a batch; every libcacard card): the
		// public-key objects, read without a login, tell them apart, so
		// the other card gets no PIN either (with another PIN it would
		// count a wrong try).
		{"same serial, other key", func(t *testing.T, tk, other *pkcs11test.Token) { other.SetSerial(t, tk.Serial) },
			func(tk, other *pkcs11test.Token) string {
				return "it has this agent's serial " + tk.Serial + ` and label "signagent-test", but not this agent's key; no PIN was sent to it`
			}},
		{"same serial, other key, other PIN", func(t *testing.T, tk, other *pkcs11test.Token) {
			other.SetSerial(t, tk.Serial)
			other.SetPIN(t, "654321")
		},
			func(tk, other *pkcs11test.Token) string {
				return "it has this agent's serial " + tk.Serial + ` and label "signagent-test", but not this agent's key; no PIN was sent to it`
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := pkcs11test.New(t)
			other := pkcs11test.NewWith(t, pkcs11test.Options{ForProcesses: true}) // same label, its own keys and serial
			tc.prepare(t, tk, other)
			m, err := tokenq.New(tokenq.Options{Open: opener(tk.Selection(tk.RSA.Label), nil), CheckEvery: 20 * time.Millisecond,
				BackoffFirst: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, OpenTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ours := m.State().Thumbprint

			tk.Remove(t)
			waitFor(t, "the token to be seen gone", func() bool { return !m.State().Ready })
			tk.PutIn(t, other)
			waitFor(t, "the other token to be looked at", func() bool {
				st := m.State()
				return st.Ready || st.PINRejected || strings.Contains(st.Reason, "different token")
			})
			st := m.State()
			switch {
			case st.Ready:
				t.Fatalf("ready with the other token's key: thumbprint %s, this agent's %s", st.Thumbprint, ours)
			case st.PINRejected:
				t.Fatalf("the agent's PIN was sent to the other token, which refused it: %s", st.Reason)
			case !strings.Contains(st.Reason, tc.want(tk, other)) || strings.Contains(st.Reason, "\n"):
				t.Fatalf("state %q; want one line with %q", st.Reason, tc.want(tk, other))
			}
			content, ts := text()
			if _, _, err := m.Sign(context.Background(), content, ts); !errors.Is(err, tokenq.ErrNotReady) || !strings.Contains(err.Error(), tc.want(tk, other)) {
				t.Fatalf("signing with the other token in: %v", err)
			}
			// SoftHSM keeps a wrong try in the token (pin-count-low): the
			// other token has counted none.
			tokens, err := pkcs11.ListTokens(context.Background(), tk.Module)
			if err != nil {
				t.Fatal(err)
			}
			for _, ti := range tokens {
				if ti.Serial == other.Serial && slices.Contains(ti.Flags, "pin-count-low") {
					t.Fatalf("the other token counted a wrong PIN: %v", ti.Flags)
				}
			}

			tk.TakeOut(t)
			tk.Insert(t)
			waitFor(t, "this agent's token to be back", func() bool { return m.State().Ready })
			if st := m.State(); st.Thumbprint != ours {
				t.Fatalf("back with thumbprint %s; want %s", st.Thumbprint, ours)
			}
			der, cert, err := m.Sign(context.Background(), content, ts)
			if err != nil {
				t.Fatalf("after this agent's token came back: %v", err)
			}
			if !cert.Equal(tk.RSA.Cert) {
				t.Fatal("signed with another certificate than this agent's")
			}
			if _, err := signer.Verify(der, content, nil); err != nil {
				t.Fatalf("the signature does not verify: %v", err)
			}
		})
	}
}

// TestSerialAdvice: a key opened with a selection that does not name the
// token's serial (the only token; a label alone) gets the warning naming
// its URI with the serial, and the flag; one chosen by serial, in a flag
// or in the key's URI, gets none.
func TestSerialAdvice(t *testing.T) {
	tk := pkcs11test.New(t)
	sel := tk.Selection(tk.RSA.Label)
	advice := func(sel pkcs11.Selection) string {
		t.Helper()
		k, err := pkcs11.Open(context.Background(), sel, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		return tokenq.SerialAdvice(sel, k)
	}
	for _, by := range []tokeninfo.TokenSelector{{}, {Label: tk.Label}} {
		s := sel
		s.Token = by
		if a := advice(s); !strings.Contains(a, "serial="+tk.Serial) || !strings.Contains(a, "--token-serial "+tk.Serial) || !strings.Contains(a, "object="+tk.RSA.Label) {
			t.Errorf("chosen by %+v: advice %q", by, a)
		}
	}
	s := sel
	s.Token = tokeninfo.TokenSelector{Serial: tk.Serial}
	if a := advice(s); a != "" {
		t.Errorf("chosen by serial: advice %q", a)
	}
	s.Token = tokeninfo.TokenSelector{}
	s.URI = "pkcs11:serial=" + tk.Serial
	if a := advice(s); a != "" {
		t.Errorf("chosen by serial in the URI: advice %q", a)
	}
}
