package pkcs11

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"
	"github.com/signagent/signagent/canonical"
)

// fakeSetup returns a registry whose loader hands out f, a selection of
// its key with PIN pin, and the number of loads.
func fakeSetup(t *testing.T, f *fakeToken, pin string) (*Registry, Selection, *atomic.Int32) {
	t.Helper()
	lib := filepath.Join(t.TempDir(), "fake.so")
	os.WriteFile(lib, nil, 0o600)
	pinFile := filepath.Join(t.TempDir(), "pin")
	os.WriteFile(pinFile, []byte(pin+"\n"), 0o600)
	loads := &atomic.Int32{}
	reg := NewRegistry(func(string) (Backend, error) { loads.Add(1); return f, nil })
	return reg, Selection{Module: lib, Registry: reg, PIN: PINSource{File: pinFile}, Timeout: 5 * time.Second}, loads
}

func openFake(t *testing.T, sel Selection) *Key {
	t.Helper()
	k, err := Open(context.Background(), sel, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

var digest = func() []byte { d := sha256.Sum256([]byte("text")); return d[:] }()

func TestModuleLoadedOnceAndFinalizedByTheLast(t *testing.T) {
	f := newFakeToken(t)
	_, sel, loads := fakeSetup(t, f, "1234")
	a := openFake(t, sel)
	b := openFake(t, sel)
	if loads.Load() != 1 || f.count("Initialize") != 1 {
		t.Fatalf("two keys: %d loads, %d C_Initialize; want 1 and 1", loads.Load(), f.count("Initialize"))
	}
	a.Close()
	if f.count("Finalize") != 0 {
		t.Fatal("finalized while a key still uses the module")
	}
	b.Close()
	b.Close() // a second Close does nothing (it used to panic)
	if f.count("Finalize") != 1 || f.count("Destroy") != 1 || f.open() != 0 {
		t.Fatalf("after the last Close: %d C_Finalize, %d unloads, %d sessions open", f.count("Finalize"), f.count("Destroy"), f.open())
	}
}

// TestTokenFailuresMarkTheKeyLost: each way a token goes away makes the
// key fail at once from then on, and its Close initializes the module
// again so that a returning token is seen.
func TestTokenFailuresMarkTheKeyLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(f *fakeToken)
		want error
	}{
		{"device removed", func(f *fakeToken) { f.always["Sign"] = p11.Error(p11.CKR_DEVICE_REMOVED) }, ErrDeviceRemoved},
		{"token not present", func(f *fakeToken) { f.always["SignInit"] = p11.Error(p11.CKR_TOKEN_NOT_PRESENT) }, ErrDeviceRemoved},
		{"session invalid", func(f *fakeToken) { f.always["SignInit"] = p11.Error(p11.CKR_SESSION_HANDLE_INVALID) }, ErrSessionClosed},
		{"handle invalid, then nothing found", func(f *fakeToken) {
			f.always["SignInit"] = p11.Error(p11.CKR_OBJECT_HANDLE_INVALID)
			f.gone = true
		}, ErrTokenLost},
		{"device error", func(f *fakeToken) { f.always["Sign"] = p11.Error(p11.CKR_DEVICE_ERROR) }, ErrDeviceError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeToken(t)
			_, sel, _ := fakeSetup(t, f, "1234")
			k := openFake(t, sel)
			if _, err := k.Sign(nil, digest, crypto.SHA256); err != nil {
				t.Fatal(err)
			}
			f.set(tc.set)
			_, err := k.Sign(nil, digest, crypto.SHA256)
			if !errors.Is(err, tc.want) || !Recoverable(err) || k.Token().Lost() == nil {
				t.Fatalf("err = %v (recoverable %v, lost %v); want %v", err, Recoverable(err), k.Token().Lost(), tc.want)
			}
			signs := f.count("SignInit")
			if _, err := k.Sign(nil, digest, crypto.SHA256); !errors.Is(err, ErrTokenUnavailable) || f.count("SignInit") != signs {
				t.Fatalf("after the loss: err = %v, %d more calls into the token", err, f.count("SignInit")-signs)
			}
			inits := f.count("Initialize")
			k.Close()
			if f.count("Initialize") != inits+1 {
				t.Fatal("Close after a loss did not initialize the module again")
			}
		})
	}
}

func TestStaleHandleIsLookedUpAgainOnce(t *testing.T) {
	f := newFakeToken(t)
	_, sel, _ := fakeSetup(t, f, "1234")
	k := openFake(t, sel)
	f.set(func(f *fakeToken) { f.fail["SignInit"] = p11.Error(p11.CKR_OBJECT_HANDLE_INVALID) })
	finds := f.count("FindObjectsInit")
	sig, err := k.Sign(nil, digest, crypto.SHA256)
	if err != nil || k.Token().Lost() != nil {
		t.Fatalf("err = %v, lost = %v", err, k.Token().Lost())
	}
	if err := rsa.VerifyPKCS1v15(&f.key.PublicKey, crypto.SHA256, digest, sig); err != nil {
		t.Fatal(err)
	}
	if n := f.count("FindObjectsInit") - finds; n != 1 {
		t.Fatalf("%d look-ups after a stale handle; want 1", n)
	}
}

func TestRefusedPINIsNotTriedAgain(t *testing.T) {
	f := newFakeToken(t)
	_, sel, _ := fakeSetup(t, f, "0000")
	for range 4 { // four reloads of an agent with a wrong PIN
		if _, err := Open(context.Background(), sel, zerolog.Nop()); !errors.Is(err, ErrPINIncorrect) {
			t.Fatalf("err = %v", err)
		} else if strings.Contains(err.Error(), "0000") || !strings.Contains(err.Error(), sel.PIN.File) {
			t.Fatalf("the error should name where the PIN came from, not the PIN: %v", err)
		}
	}
	if n := f.count("Login"); n != 1 {
		t.Fatalf("the token was sent a refused PIN %d times", n)
	}
	// The PIN source changes: the new PIN is tried.
	os.WriteFile(sel.PIN.File, []byte("1234\n"), 0o600)
	k, err := Open(context.Background(), sel, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	k.Close()
	if n := f.count("Login"); n != 2 {
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
		{"locked", p11.CKF_USER_PIN_LOCKED, false, nil, ErrPINLocked, 0},
		{"final try refused", p11.CKF_USER_PIN_FINAL_TRY, false, nil, ErrPINFinalTry, 0},
		{"final try allowed", p11.CKF_USER_PIN_FINAL_TRY, true, nil, nil, 1},
		{"count low logs in", p11.CKF_USER_PIN_COUNT_LOW, false, nil, nil, 1},
		{"locked by the login", 0, false, p11.Error(p11.CKR_PIN_LOCKED), ErrPINLocked, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeToken(t)
			f.flags |= tc.flags
			if tc.loginErr != nil {
				f.always["Login"] = tc.loginErr
			}
			_, sel, _ := fakeSetup(t, f, "1234")
			sel.AllowFinalTry = tc.allowFinal
			k, err := Open(context.Background(), sel, zerolog.Nop())
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if err == nil {
				k.Close()
			} else if strings.Contains(err.Error(), "\n") {
				t.Fatalf("not one line: %q", err)
			}
			if f.count("Login") != tc.logins {
				t.Fatalf("%d logins, want %d", f.count("Login"), tc.logins)
			}
		})
	}
}

// TestHungCallIsAbandoned: a module that never returns from C_Sign. The
// caller is answered at its deadline, the key is lost, Close neither waits
// nor finalizes, and when the call finally returns its session is closed.
func TestHungCallIsAbandoned(t *testing.T) {
	f := newFakeToken(t)
	_, sel, _ := fakeSetup(t, f, "1234")
	sel.Timeout = 100 * time.Millisecond
	k := openFake(t, sel)
	release := make(chan struct{})
	f.set(func(f *fakeToken) { f.hang["Sign"] = release })
	start := time.Now()
	_, err := k.Sign(nil, digest, crypto.SHA256)
	if d := time.Since(start); !errors.Is(err, ErrTokenTimeout) || !Recoverable(err) || d > time.Second {
		t.Fatalf("err = %v after %v", err, d)
	}
	start = time.Now()
	k.Close()
	if d := time.Since(start); d > 500*time.Millisecond || f.count("Finalize") != 0 { // the stuck call never returns by itself
		t.Fatalf("Close took %v and finalized %d times with a call stuck in the module", d, f.count("Finalize"))
	}
	close(release)
	deadline := time.Now().Add(2 * time.Second)
	for f.open() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if f.open() != 0 {
		t.Fatalf("%d sessions left open after the stuck call returned", f.open())
	}
}

func TestOpenIsBoundedByItsContext(t *testing.T) {
	for _, op := range []string{"Initialize", "GetSlotList", "Login", "FindObjects"} {
		t.Run(op, func(t *testing.T) {
			f := newFakeToken(t)
			release := make(chan struct{})
			defer close(release)
			f.hang[op] = release
			_, sel, _ := fakeSetup(t, f, "1234")
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := Open(ctx, sel, zerolog.Nop())
			if d := time.Since(start); !errors.Is(err, ErrTokenTimeout) || d > time.Second {
				t.Fatalf("err = %v after %v", err, d)
			}
		})
	}
}

func TestDecryptOnTheToken(t *testing.T) {
	f := newFakeToken(t)
	_, sel, _ := fakeSetup(t, f, "1234")
	k := openFake(t, sel)
	ct, _ := rsa.EncryptPKCS1v15(rand.Reader, &f.key.PublicKey, []byte("challenge"))
	pt, err := k.Decrypt(nil, ct, nil)
	if err != nil || string(pt) != "challenge" {
		t.Fatalf("%q %v", pt, err)
	}
}

func TestCertificateChoice(t *testing.T) {
	now := time.Now()
	t.Run("valid beats expired", func(t *testing.T) {
		f := newFakeToken(t)
		f.certs = nil
		f.addCert(t, "expired", now.AddDate(-2, 0, 0), now.AddDate(-1, 0, 0))
		valid := f.addCert(t, "valid", now.Add(-time.Hour), now.AddDate(1, 0, 0))
		_, sel, _ := fakeSetup(t, f, "1234")
		if k := openFake(t, sel); !k.Certificate().Equal(valid) {
			t.Fatalf("chose %q", k.Certificate().Subject.CommonName)
		}
	})
	t.Run("two valid is an error that lists them", func(t *testing.T) {
		f := newFakeToken(t)
		a := f.addCert(t, "second", now.Add(-time.Hour), now.AddDate(1, 0, 0))
		_, sel, _ := fakeSetup(t, f, "1234")
		_, err := Open(context.Background(), sel, zerolog.Nop())
		if !errors.Is(err, ErrCertAmbiguous) || !strings.Contains(err.Error(), canonical.ThumbprintOf(a)) || !strings.Contains(err.Error(), "--cert") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("only another key's certificate", func(t *testing.T) {
		f := newFakeToken(t)
		f.certs = nil
		f.addCert(t, "x", now.Add(-time.Hour), now.AddDate(1, 0, 0))
		other, _ := rsa.GenerateKey(rand.Reader, 2048)
		f.key = other // the certificate stays the old key's
		_, sel, _ := fakeSetup(t, f, "1234")
		if _, err := Open(context.Background(), sel, zerolog.Nop()); !errors.Is(err, ErrCertMismatch) {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestBusySessionsAreNotATokenFailure: a deadline that passes while every
// session is in use is the queue's problem: the key stays usable.
func TestBusySessionsAreNotATokenFailure(t *testing.T) {
	f := newFakeToken(t)
	_, sel, _ := fakeSetup(t, f, "1234")
	sel.MaxSessions = 2
	k := openFake(t, sel)
	release := make(chan struct{})
	f.set(func(f *fakeToken) { f.hang["Sign"] = release })
	done := make(chan error, 2)
	for range 2 {
		go func() { _, err := k.Sign(nil, digest, crypto.SHA256); done <- err }()
	}
	for f.count("Sign") < 2 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := k.SignContext(ctx, digest, crypto.SHA256)
	if err == nil || Recoverable(err) || !errors.Is(err, context.DeadlineExceeded) || k.Token().Lost() != nil {
		t.Fatalf("err = %v (recoverable %v), lost = %v", err, Recoverable(err), k.Token().Lost())
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
	f := newFakeToken(t)
	_, sel, _ := fakeSetup(t, f, "1234")
	k := openFake(t, sel)
	if err := k.Check(context.Background()); err != nil {
		t.Fatalf("a present card: %v", err)
	}
	f.set(func(f *fakeToken) { f.absent = true })
	err := k.Check(context.Background())
	if !errors.Is(err, ErrDeviceRemoved) || !Recoverable(err) {
		t.Fatalf("a card out that the module still describes from memory: %v", err)
	}
	if strings.Contains(err.Error(), "1234") {
		t.Fatalf("the PIN in an error: %v", err)
	}
	logins := f.count("Login")
	f.set(func(f *fakeToken) { f.absent = false })
	if err := k.Check(context.Background()); err != nil && !Recoverable(err) {
		t.Fatalf("the card back: %v", err)
	}
	if f.count("Login") > logins+1 {
		t.Fatalf("%d logins for one reinsertion", f.count("Login")-logins)
	}
}

// TestInitializeWaitsForFinalize: a key opened while the key it replaces
// is still finalizing the module (a card's reconnect) initializes it only
// once C_Finalize has returned: OpenSC's heap broke ("malloc(): unaligned
// fastbin chunk detected" in C_Initialize, TestCardAgent under the race
// detector) when the two ran at once in one library. The fake holds
// C_Finalize, which a real module cannot be made to do on demand.
func TestInitializeWaitsForFinalize(t *testing.T) {
	f := newFakeToken(t)
	_, sel, _ := fakeSetup(t, f, "1234")
	a := openFake(t, sel)
	hold := make(chan struct{})
	f.set(func(f *fakeToken) { f.hang["Finalize"] = hold })
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	for f.count("Finalize") == 0 {
		time.Sleep(time.Millisecond)
	}
	opened := make(chan *Key)
	go func() {
		k, err := Open(context.Background(), sel, zerolog.Nop())
		if err != nil {
			t.Error(err)
		}
		opened <- k
	}()
	time.Sleep(50 * time.Millisecond)
	if n := f.count("Initialize"); n != 1 {
		t.Fatalf("C_Initialize ran %d times while C_Finalize was still running; want only the first", n)
	}
	f.set(func(f *fakeToken) { delete(f.hang, "Finalize") })
	close(hold)
	<-closed
	k := <-opened
	if k == nil {
		t.FailNow()
	}
	defer k.Close()
	if f.count("Initialize") != 2 {
		t.Fatalf("C_Initialize ran %d times; want 2 (the second after C_Finalize)", f.count("Initialize"))
	}
	if _, err := k.Sign(nil, digest, crypto.SHA256); err != nil {
		t.Fatal(err)
	}
}

// TestCheckBehindABusyToken: a check that does not get its answer in time
// while the token goes on answering signatures is ErrTokenBusy and leaves
// the key in use (a slow card kept busy by a queue is there: TestCardAgentSlow
// saw the agent call it not ready); a check that times out with no other
// answer meanwhile still marks the key lost. The fake holds C_GetSlotInfo.
func TestCheckBehindABusyToken(t *testing.T) {
	f := newFakeToken(t)
	_, sel, _ := fakeSetup(t, f, "1234")
	k := openFake(t, sel)
	hold := make(chan struct{})
	f.set(func(f *fakeToken) { f.hang["GetSlotInfo"] = hold })
	asked := f.count("GetSlotInfo")
	done := make(chan error)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		done <- k.Check(ctx)
	}()
	for deadline := time.Now().Add(10 * time.Second); f.count("GetSlotInfo") == asked; { // the Check is in the module
		if time.Now().After(deadline) {
			t.Fatal("the check did not reach the module within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := k.Sign(nil, digest, crypto.SHA256); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrTokenBusy) || Recoverable(err) || k.Token().Lost() != nil {
		t.Fatalf("check behind a busy token: %v (lost: %v)", err, k.Token().Lost())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := k.Check(ctx); !errors.Is(err, ErrTokenTimeout) || k.Token().Lost() == nil {
		t.Fatalf("check with no answer at all: %v (lost: %v)", err, k.Token().Lost())
	}
	f.set(func(f *fakeToken) { delete(f.hang, "GetSlotInfo") })
	close(hold)
}
