package pkcs11test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/softhsm"
)

// A card swapped under a running agent, as SoftHSM can be made to show
// it: the agent's token directory moved aside (Remove) and another
// token's files put in its place (PutIn), then taken out again (TakeOut)
// and the agent's put back (Insert). A second token of a test has the
// same label and PIN as the first and keys and a serial of its own; its
// PIN can be changed (SetPIN) and its serial made the first's (SetSerial),
// as two cards of one batch may share it.

// PutIn puts a copy of other's token files where tk's were: the module
// then finds other's token in tk's place. tk's token must be away
// (Remove).
func (tk *Token) PutIn(t testing.TB, other *Token) {
	t.Helper()
	tf, err := readTokenFiles(other, "tokens")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tk.Dir, "tokens")); !os.IsNotExist(err) {
		t.Fatalf("PutIn: token %s is still in place (Remove it first)", tk.Serial)
	}
	// Copied aside and moved in at once: a card comes in whole, and the
	// module must never see a token of the other's serial whose key
	// files are not there yet (it was seen so once in CI's race run).
	in := tf.sub
	tf.sub = "tokens.in"
	err = tf.copyTo(tk.Dir)
	tf.sub = in
	if err == nil {
		err = os.Rename(filepath.Join(tk.Dir, "tokens.in"), filepath.Join(tk.Dir, "tokens"))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TakeOut removes what PutIn put in tk's place; Insert then puts tk's
// token back.
//
// SoftHSM in the test's process may be writing a file in the token's
// directory while it is removed (RemoveAll then fails with "directory not
// empty": once in CI's race run): it is tried again. (A rename would not
// do: SoftHSM keeps the files it has open and would go on seeing them.)
func (tk *Token) TakeOut(t testing.TB) {
	t.Helper()
	var err error
	for range 50 {
		if err = os.RemoveAll(filepath.Join(tk.Dir, "tokens")); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal(err)
}

// SetPIN sets the token's user PIN to pin (logged in as the security
// officer) and writes it to its PIN file. It loads SoftHSM in this
// process with the token's configuration, so it must run while nothing in
// the test holds SoftHSM (before a key is opened).
func (tk *Token) SetPIN(t testing.TB, pin string) {
	t.Helper()
	err := withConf(tk.Conf, func() error {
		ctx, release, err := pkcs11.ProvisioningContext(tk.Module)
		if err != nil {
			return err
		}
		defer release()
		slot, err := slotOf(ctx, tk.Serial)
		if err != nil {
			return err
		}
		sh, err := ctx.OpenSession(slot, p11.CKF_SERIAL_SESSION|p11.CKF_RW_SESSION)
		if err != nil {
			return err
		}
		defer ctx.CloseSession(sh)
		if err := ctx.Login(sh, p11.CKU_SO, tk.SOPIN); err != nil {
			return err
		}
		defer ctx.Logout(sh)
		return ctx.InitPIN(sh, pin)
	})
	if err != nil {
		t.Fatalf("set the PIN of token %s: %v", tk.Serial, err)
	}
	tk.PIN = pin
	if err := os.WriteFile(tk.PINFile, []byte(pin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// slotOf returns the slot of the token with serial.
func slotOf(ctx *p11.Ctx, serial string) (uint, error) {
	slots, err := ctx.GetSlotList(true)
	if err != nil {
		return 0, err
	}
	for _, s := range slots {
		if ti, err := ctx.GetTokenInfo(s); err == nil && strings.TrimRight(ti.SerialNumber, " ") == serial {
			return s, nil
		}
	}
	return 0, fmt.Errorf("no token with serial %s", serial)
}

// SetSerial gives the token serial instead of its own, as a card of a
// batch that shares its serial. SoftHSM keeps the serial in clear in the
// token's token.object (CKA_OS_TOKENSERIAL, 16 characters) and checks
// nothing over it, so it is rewritten there, at the same length.
func (tk *Token) SetSerial(t testing.TB, serial string) {
	t.Helper()
	if len(serial) != len(tk.Serial) {
		t.Fatalf("SetSerial: %q is not %d characters as SoftHSM's serials are", serial, len(tk.Serial))
	}
	files, _ := filepath.Glob(filepath.Join(tk.Dir, "tokens", "*", "token.object"))
	if len(files) != 1 {
		t.Fatalf("SetSerial: %d token.object files under %s; want 1", len(files), tk.Dir)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte(tk.Serial)); n != 1 {
		t.Fatalf("SetSerial: the serial %s is %d times in %s; want once", tk.Serial, n, files[0])
	}
	if err := os.WriteFile(files[0], bytes.Replace(b, []byte(tk.Serial), []byte(serial), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	tk.Serial = serial
}

// withConf runs fn with SOFTHSM2_CONF set to conf in this process, one at
// a time: SoftHSM reads it when it is initialized, so fn reaches conf's
// tokens only when nothing else holds SoftHSM meanwhile.
func withConf(conf string, fn func() error) error {
	makingInProcess.Lock()
	defer makingInProcess.Unlock()
	prev, had := os.LookupEnv(softhsm.ConfEnv)
	os.Setenv(softhsm.ConfEnv, conf)
	defer func() {
		if had {
			os.Setenv(softhsm.ConfEnv, prev)
		} else {
			os.Unsetenv(softhsm.ConfEnv)
		}
	}()
	return fn()
}
