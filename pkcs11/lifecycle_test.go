package pkcs11_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/pkcs11test/fake"
	"github.com/signagent/signagent/pkcs11/tokenerr"
)

func openFake(t *testing.T, sel pkcs11.Selection) *pkcs11.Key {
	t.Helper()
	k, err := pkcs11.Open(context.Background(), sel, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

var digest = func() []byte { d := sha256.Sum256([]byte("text")); return d[:] }()

func TestModuleLoadedOnceAndFinalizedByTheLast(t *testing.T) {
	f := fake.New(t)
	_, sel, loads := f.Setup(t, "1234")
	a := openFake(t, sel)
	b := openFake(t, sel)
	if loads.Load() != 1 || f.Count("Initialize") != 1 {
		t.Fatalf("two keys: %d loads, %d C_Initialize; want 1 and 1", loads.Load(), f.Count("Initialize"))
	}
	a.Close()
	if f.Count("Finalize") != 0 {
		t.Fatal("finalized while a key still uses the module")
	}
	b.Close()
	b.Close() // a second Close does nothing (it used to panic)
	if f.Count("Finalize") != 1 || f.Count("Destroy") != 1 || f.Sessions() != 0 {
		t.Fatalf("after the last Close: %d C_Finalize, %d unloads, %d sessions open", f.Count("Finalize"), f.Count("Destroy"), f.Sessions())
	}
}

// TestTokenFailuresMarkTheKeyLost: each way a token goes away makes the
// key fail at once from then on, and its Close initializes the module
// again so that a returning token is seen.
func TestTokenFailuresMarkTheKeyLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(f *fake.Backend)
		want error
	}{
		{"device removed", func(f *fake.Backend) { f.Always["Sign"] = p11.Error(p11.CKR_DEVICE_REMOVED) }, tokenerr.ErrDeviceRemoved},
		{"token not present", func(f *fake.Backend) { f.Always["SignInit"] = p11.Error(p11.CKR_TOKEN_NOT_PRESENT) }, tokenerr.ErrDeviceRemoved},
		{"session invalid", func(f *fake.Backend) { f.Always["SignInit"] = p11.Error(p11.CKR_SESSION_HANDLE_INVALID) }, tokenerr.ErrSessionClosed},
		{"handle invalid, then nothing found", func(f *fake.Backend) {
			f.Always["SignInit"] = p11.Error(p11.CKR_OBJECT_HANDLE_INVALID)
			f.Gone = true
		}, tokenerr.ErrTokenLost},
		{"device error", func(f *fake.Backend) { f.Always["Sign"] = p11.Error(p11.CKR_DEVICE_ERROR) }, tokenerr.ErrDeviceError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fake.New(t)
			_, sel, _ := f.Setup(t, "1234")
			k := openFake(t, sel)
			if _, err := k.Sign(nil, digest, crypto.SHA256); err != nil {
				t.Fatal(err)
			}
			f.Set(tc.set)
			_, err := k.Sign(nil, digest, crypto.SHA256)
			if !errors.Is(err, tc.want) || !tokenerr.Recoverable(err) || k.Token().Lost() == nil {
				t.Fatalf("err = %v (recoverable %v, lost %v); want %v", err, tokenerr.Recoverable(err), k.Token().Lost(), tc.want)
			}
			signs := f.Count("SignInit")
			if _, err := k.Sign(nil, digest, crypto.SHA256); !errors.Is(err, tokenerr.ErrTokenUnavailable) || f.Count("SignInit") != signs {
				t.Fatalf("after the loss: err = %v, %d more calls into the token", err, f.Count("SignInit")-signs)
			}
			inits := f.Count("Initialize")
			k.Close()
			if f.Count("Initialize") != inits+1 {
				t.Fatal("Close after a loss did not initialize the module again")
			}
		})
	}
}

func TestStaleHandleIsLookedUpAgainOnce(t *testing.T) {
	f := fake.New(t)
	_, sel, _ := f.Setup(t, "1234")
	k := openFake(t, sel)
	f.Set(func(f *fake.Backend) { f.Fail["SignInit"] = p11.Error(p11.CKR_OBJECT_HANDLE_INVALID) })
	finds := f.Count("FindObjectsInit")
	sig, err := k.Sign(nil, digest, crypto.SHA256)
	if err != nil || k.Token().Lost() != nil {
		t.Fatalf("err = %v, lost = %v", err, k.Token().Lost())
	}
	if err := rsa.VerifyPKCS1v15(&f.Key.PublicKey, crypto.SHA256, digest, sig); err != nil {
		t.Fatal(err)
	}
	if n := f.Count("FindObjectsInit") - finds; n != 1 {
		t.Fatalf("%d look-ups after a stale handle; want 1", n)
	}
}

func TestRefusedPINIsNotTriedAgain(t *testing.T) {
	f := fake.New(t)
	_, sel, _ := f.Setup(t, "0000")
	for range 4 { // four reloads of an agent with a wrong PIN
		if _, err := pkcs11.Open(context.Background(), sel, zerolog.Nop()); !errors.Is(err, tokenerr.ErrPINIncorrect) {
			t.Fatalf("err = %v", err)
		} else if strings.Contains(err.Error(), "0000") || !strings.Contains(err.Error(), sel.PIN.File) {
			t.Fatalf("the error should name where the PIN came from, not the PIN: %v", err)
		}
	}
	if n := f.Count("Login"); n != 1 {
		t.Fatalf("the token was sent a refused PIN %d times", n)
	}
	// The PIN source changes: the new PIN is tried.
	os.WriteFile(sel.PIN.File, []byte("1234\n"), 0o600)
	k, err := pkcs11.Open(context.Background(), sel, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	k.Close()
	if n := f.Count("Login"); n != 2 {
		t.Fatalf("%d logins; want 2", n)
	}
}

func TestPINFlagsAreReadBeforeLogin(t *testing.T) {
	for _, tc := range []struct {
		name       string
		flags      uint
		allowFinal bool
		loginErr   error
		want       error
		logins     int
	}{
		{"locked", p11.CKF_USER_PIN_LOCKED, false, nil, tokenerr.ErrPINLocked, 0},
		{"final try refused", p11.CKF_USER_PIN_FINAL_TRY, false, nil, tokenerr.ErrPINFinalTry, 0},
		{"final try allowed", p11.CKF_USER_PIN_FINAL_TRY, true, nil, nil, 1},
		{"count low logs in", p11.CKF_USER_PIN_COUNT_LOW, false, nil, nil, 1},
		{"locked by the login", 0, false, p11.Error(p11.CKR_PIN_LOCKED), tokenerr.ErrPINLocked, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fake.New(t)
			f.Flags |= tc.flags
			if tc.loginErr != nil {
				f.Always["Login"] = tc.loginErr
			}
			_, sel, _ := f.Setup(t, "1234")
			sel.AllowFinalTry = tc.allowFinal
			k, err := pkcs11.Open(context.Background(), sel, zerolog.Nop())
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if err == nil {
				k.Close()
			} else if strings.Contains(err.Error(), "\n") {
				t.Fatalf("not one line: %q", err)
			}
			if f.Count("Login") != tc.logins {
				t.Fatalf("%d logins, want %d", f.Count("Login"), tc.logins)
			}
		})
	}
}

// TestHungCallIsAbandoned: a module that never returns from C_Sign. The
// caller is answered at its deadline, the key is lost, Close neither waits
// nor finalizes, and when the call finally returns its session is closed.
func TestHungCallIsAbandoned(t *testing.T) {
	f := fake.New(t)
	_, sel, _ := f.Setup(t, "1234")
	sel.Timeout = 100 * time.Millisecond
	k := openFake(t, sel)
	release := make(chan struct{})
	f.Set(func(f *fake.Backend) { f.Hang["Sign"] = release })
	start := time.Now()
	_, err := k.Sign(nil, digest, crypto.SHA256)
	if d := time.Since(start); !errors.Is(err, tokenerr.ErrTokenTimeout) || !tokenerr.Recoverable(err) || d > time.Second {
		t.Fatalf("err = %v after %v", err, d)
	}
	start = time.Now()
	k.Close()
	if d := time.Since(start); d > 500*time.Millisecond || f.Count("Finalize") != 0 { // the stuck call never returns by itself
		t.Fatalf("Close took %v and finalized %d times with a call stuck in the module", d, f.Count("Finalize"))
	}
	close(release)
	deadline := time.Now().Add(2 * time.Second)
	for f.Sessions() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if f.Sessions() != 0 {
		t.Fatalf("%d sessions left open after the stuck call returned", f.Sessions())
	}
}

func TestOpenIsBoundedByItsContext(t *testing.T) {
	for _, op := range []string{"Initialize", "GetSlotList", "Login", "FindObjects"} {
		t.Run(op, func(t *testing.T) {
			f := fake.New(t)
			release := make(chan struct{})
			defer close(release)
			f.Hang[op] = release
			_, sel, _ := f.Setup(t, "1234")
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := pkcs11.Open(ctx, sel, zerolog.Nop())
			if d := time.Since(start); !errors.Is(err, tokenerr.ErrTokenTimeout) || d > time.Second {
				t.Fatalf("err = %v after %v", err, d)
			}
		})
	}
}

func TestDecryptOnTheToken(t *testing.T) {
	f := fake.New(t)
	_, sel, _ := f.Setup(t, "1234")
	k := openFake(t, sel)
	ct, _ := rsa.EncryptPKCS1v15(rand.Reader, &f.Key.PublicKey, []byte("challenge"))
	pt, err := k.Decrypt(nil, ct, nil)
	if err != nil || string(pt) != "challenge" {
		t.Fatalf("%q %v", pt, err)
	}
}

func TestCertificateChoice(t *testing.T) {
	now := time.Now()
	t.Run("valid beats expired", func(t *testing.T) {
		f := fake.New(t)
		f.ClearCerts()
		f.AddCert(t, "expired", now.AddDate(-2, 0, 0), now.AddDate(-1, 0, 0))
		valid := f.AddCert(t, "valid", now.Add(-time.Hour), now.AddDate(1, 0, 0))
		_, sel, _ := f.Setup(t, "1234")
		if k := openFake(t, sel); !k.Certificate().Equal(valid) {
			t.Fatalf("chose %q", k.Certificate().Subject.CommonName)
		}
	})
	t.Run("two valid is an error that lists them", func(t *testing.T) {
		f := fake.New(t)
		a := f.AddCert(t, "second", now.Add(-time.Hour), now.AddDate(1, 0, 0))
		_, sel, _ := f.Setup(t, "1234")
		_, err := pkcs11.Open(context.Background(), sel, zerolog.Nop())
		if !errors.Is(err, tokenerr.ErrCertAmbiguous) || !strings.Contains(err.Error(), canonical.ThumbprintOf(a)) || !strings.Contains(err.Error(), "--cert") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("only another key's certificate", func(t *testing.T) {
		f := fake.New(t)
		f.ClearCerts()
		f.AddCert(t, "x", now.Add(-time.Hour), now.AddDate(1, 0, 0))
		other, _ := rsa.GenerateKey(rand.Reader, 2048)
		f.Key = other // the certificate stays the old key's
		_, sel, _ := f.Setup(t, "1234")
		if _, err := pkcs11.Open(context.Background(), sel, zerolog.Nop()); !errors.Is(err, tokenerr.ErrCertMismatch) {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestBusySessionsAreNotATokenFailure: a deadline that passes while every
// session is in use is the queue's problem: the key stays usable.
func TestBusySessionsAreNotATokenFailure(t *testing.T) {
	f := fake.New(t)
	_, sel, _ := f.Setup(t, "1234")
	sel.MaxSessions = 2
	k := openFake(t, sel)
	release := make(chan struct{})
	f.Set(func(f *fake.Backend) { f.Hang["Sign"] = release })
	done := make(chan error, 2)
	for range 2 {
		go func() { _, err := k.Sign(nil, digest, crypto.SHA256); done <- err }()
	}
	for f.Count("Sign") < 2 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := k.SignContext(ctx, digest, crypto.SHA256)
	if err == nil || tokenerr.Recoverable(err) || !errors.Is(err, context.DeadlineExceeded) || k.Token().Lost() != nil {
		t.Fatalf("err = %v (recoverable %v), lost = %v", err, tokenerr.Recoverable(err), k.Token().Lost())
	}
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.Sign(nil, digest, crypto.SHA256); err != nil {
		t.Fatalf("after the busy spell: %v", err)
	}
}

// A card taken out behind OpenSC: only C_GetSlotInfo says so (CKF_TOKEN_PRESENT
// cleared), while C_GetTokenInfo and C_GetAttributeValue answer from
// memory, as measured on pcscd and OpenSC (shared/spec/smartcard-stack.md).
// Check must say the token is gone, as a removed device, so that the
// agent's /readyz does not report a card that is out as ready; and that
// the card is back when the slot says so, without a login.
func TestCheckAsksTheReader(t *testing.T) {
	f := fake.New(t)
	_, sel, _ := f.Setup(t, "1234")
	k := openFake(t, sel)
	if err := k.Check(context.Background()); err != nil {
		t.Fatalf("a present card: %v", err)
	}
	f.Set(func(f *fake.Backend) { f.Absent = true })
	err := k.Check(context.Background())
	if !errors.Is(err, tokenerr.ErrDeviceRemoved) || !tokenerr.Recoverable(err) {
		t.Fatalf("a card out that the module still describes from memory: %v", err)
	}
	if strings.Contains(err.Error(), "1234") {
		t.Fatalf("the PIN in an error: %v", err)
	}
	logins := f.Count("Login")
	f.Set(func(f *fake.Backend) { f.Absent = false })
	if err := k.Check(context.Background()); err != nil && !tokenerr.Recoverable(err) {
		t.Fatalf("the card back: %v", err)
	}
	if f.Count("Login") > logins+1 {
		t.Fatalf("%d logins for one reinsertion", f.Count("Login")-logins)
	}
}

// TestInitializeWaitsForFinalize: a key opened while the key it replaces
// is still finalizing the module (a card's reconnect) initializes it only
// once C_Finalize has returned: OpenSC's heap broke ("malloc(): unaligned
// fastbin chunk detected" in C_Initialize, TestCardAgent under the race
// detector) when the two ran at once in one library. The fake holds
// C_Finalize, which a real module cannot be made to do on demand.
func TestInitializeWaitsForFinalize(t *testing.T) {
	f := fake.New(t)
	_, sel, _ := f.Setup(t, "1234")
	a := openFake(t, sel)
	hold := make(chan struct{})
	f.Set(func(f *fake.Backend) { f.Hang["Finalize"] = hold })
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	for f.Count("Finalize") == 0 {
		time.Sleep(time.Millisecond)
	}
	opened := make(chan *pkcs11.Key)
	go func() {
		k, err := pkcs11.Open(context.Background(), sel, zerolog.Nop())
		if err != nil {
			t.Error(err)
		}
		opened <- k
	}()
	time.Sleep(50 * time.Millisecond)
	if n := f.Count("Initialize"); n != 1 {
		t.Fatalf("C_Initialize ran %d times while C_Finalize was still running; want only the first", n)
	}
	f.Set(func(f *fake.Backend) { delete(f.Hang, "Finalize") })
	close(hold)
	<-closed
	k := <-opened
	if k == nil {
		t.FailNow()
	}
	defer k.Close()
	if f.Count("Initialize") != 2 {
		t.Fatalf("C_Initialize ran %d times; want 2 (the second after C_Finalize)", f.Count("Initialize"))
	}
	if _, err := k.Sign(nil, digest, crypto.SHA256); err != nil {
		t.Fatal(err)
	}
}

// TestCheckBehindABusyToken: a check that does not get its answer in time
// while the token goes on answering signatures is tokenerr.ErrTokenBusy and leaves
// the key in use (a slow card kept busy by a queue is there: TestCardAgentSlow
// saw the agent call it not ready); a check that times out with no other
// answer meanwhile still marks the key lost. The fake holds C_GetSlotInfo.
func TestCheckBehindABusyToken(t *testing.T) {
	f := fake.New(t)
	_, sel, _ := f.Setup(t, "1234")
	k := openFake(t, sel)
	hold := make(chan struct{})
	f.Set(func(f *fake.Backend) { f.Hang["GetSlotInfo"] = hold })
	asked := f.Count("GetSlotInfo")
	done := make(chan error)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		done <- k.Check(ctx)
	}()
	for deadline := time.Now().Add(10 * time.Second); f.Count("GetSlotInfo") == asked; { // the Check is in the module
		if time.Now().After(deadline) {
			t.Fatal("the check did not reach the module within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := k.Sign(nil, digest, crypto.SHA256); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, tokenerr.ErrTokenBusy) || tokenerr.Recoverable(err) || k.Token().Lost() != nil {
		t.Fatalf("check behind a busy token: %v (lost: %v)", err, k.Token().Lost())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := k.Check(ctx); !errors.Is(err, tokenerr.ErrTokenTimeout) || k.Token().Lost() == nil {
		t.Fatalf("check with no answer at all: %v (lost: %v)", err, k.Token().Lost())
	}
	f.Set(func(f *fake.Backend) { delete(f.Hang, "GetSlotInfo") })
	close(hold)
}

// TestSessionOpenBehindABusyTokenIsNotLost: a session that cannot be
// opened in time while the token goes on answering this process's other
// sessions (a card does one thing at a time; OpenSC opens a session only
// between them) is the queue's wait, answered as a deadline passed, and
// does not mark the token lost; a session the module opens after the
// caller gave up is closed. Without it, callers queued on a slow card were
// answered 503 token_not_ready (agent.TestCardAgentSlow, on a loaded
// machine).
func TestSessionOpenBehindABusyTokenIsNotLost(t *testing.T) {
	f := fake.New(t)
	_, sel, _ := f.Setup(t, "1234")
	sel.Timeout = 500 * time.Millisecond
	k := openFake(t, sel)
	releaseSign, releaseOpen := make(chan struct{}), make(chan struct{})
	f.Set(func(f *fake.Backend) { f.Hang["Sign"] = releaseSign; f.Hang["OpenSession"] = releaseOpen })
	waitCount := func(op string, n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); f.Count(op) < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s was called %d times, want %d", op, f.Count(op), n)
			}
		}
	}
	first := make(chan error, 1)
	go func() { _, err := k.Sign(nil, digest, crypto.SHA256); first <- err }() // takes the pool's session
	waitCount("Sign", 1)
	opens := f.Count("OpenSession")
	second := make(chan error, 1)
	go func() { _, err := k.Sign(nil, digest, crypto.SHA256); second <- err }() // opens another: it hangs
	waitCount("OpenSession", opens+1)
	f.Set(func(f *fake.Backend) { delete(f.Hang, "Sign") })
	close(releaseSign) // the token answers the first meanwhile
	if err := <-first; err != nil {
		t.Fatalf("the first signature: %v", err)
	}
	err := <-second
	if err == nil || errors.Is(err, tokenerr.ErrTokenTimeout) || !errors.Is(err, context.DeadlineExceeded) || tokenerr.Recoverable(err) {
		t.Fatalf("a session not opened in time behind a busy token: %v; want a deadline passed, not the token's timeout", err)
	}
	if !strings.Contains(err.Error(), "while it was answering the others") {
		t.Fatalf("the error does not say why: %v", err)
	}
	if _, err := k.Sign(nil, digest, crypto.SHA256); err != nil {
		t.Fatalf("the next signature, on the pool's session: %v (the token was marked lost)", err)
	}
	f.Set(func(f *fake.Backend) { delete(f.Hang, "OpenSession") })
	close(releaseOpen) // the module opens the abandoned session at last: it is closed
	for deadline := time.Now().Add(2 * time.Second); f.Sessions() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions open after the late one was opened, want 1 (the pool's)", f.Sessions())
		}
	}
}
