package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/tokencmd"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gosttoken"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/pkcs11/softhsm"
)

// tokenCheck runs `signagent token check` as the real binary and returns
// its exit status, stdout and stderr.
func runTokenCheck(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := signagent(t, env, append([]string{"token", "check", "--rounds", "3"}, args...)...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	code, stderr, _ := runBinary(t, cmd)
	return code, stdout.String(), stderr
}

func wantLines(t *testing.T, out string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(out, l) {
			t.Errorf("output lacks %q:\n%s", l, out)
		}
	}
}

func TestTokenCheckSoftHSM(t *testing.T) {
	tk := pkcs11test.New(t)
	sel := []string{"--module", tk.Module, "--token-label", tk.Label, "--pin-file", tk.PINFile}
	t.Run("rsa", func(t *testing.T) {
		code, out, stderr := runTokenCheck(t, nil, append(sel, "--key-label", "rsa")...)
		if code != 0 {
			t.Fatalf("exit %d: %s\n%s", code, stderr, out)
		}
		wantLines(t, out, `library: "Implementation of PKCS11" by "SoftHSM"`, `token: "signagent-test"`,
			`key: "rsa" (id 01): RSA 2048; may sign: yes, may decrypt: yes`,
			`certificate: "signagent test RSA", thumbprint `,
			"trusted authentication: yes (RSA 2048, CKM_RSA_PKCS", "a signature verified against the certificate: median ",
			"certificate login: yes (RSA 2048, CKM_RSA_PKCS decryption", "result: every function the key allows works")
		if strings.Contains(out, tk.PIN) {
			t.Errorf("the output holds the PIN:\n%s", out)
		}
	})
	t.Run("ec", func(t *testing.T) {
		code, out, stderr := runTokenCheck(t, nil, append(sel, "--key-label", "ec", "--json")...)
		if code != 0 {
			t.Fatalf("exit %d: %s\n%s", code, stderr, out)
		}
		var r tokencmd.CheckReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if !r.OK || r.Key.Type != "EC" || r.Key.Bits != 256 || r.Certificate == nil || len(r.Mechanisms) == 0 || len(r.Module.Slots) == 0 {
			t.Fatalf("report: %s", out)
		}
		if f := r.Functions[0]; !f.Works || f.Timing == nil || f.Timing.Rounds != 3 || !strings.Contains(f.Uses, "CKM_ECDSA") {
			t.Errorf("trusted authentication: %+v", f)
		}
		if f := r.Functions[1]; f.Allowed || f.Tried || !strings.Contains(f.Why, "RSA keys only") {
			t.Errorf("certificate login of an EC key: %+v", f)
		}
	})
}

func TestTokenCheckGOST(t *testing.T) {
	derive := []string{"certificate login: yes (GOST 256 CryptoPro-A, derive and unwrap: CKM_GOSTR3410_12_DERIVE (kdf CKD_KDF_GOSTR3411_2012_256), diversified by CKM_KDF_4357",
		"one-step: not offered (no CKM_GOSTR3410_KEY_WRAP)", "tried derive+CKM_KDF_4357: works", "tried derive(CKD_KDF_4357): works"}
	for _, tc := range []struct {
		name  string
		o     gosttoken.Options
		uses  string
		login []string
	}{
		{"hashing", gosttoken.Options{}, "CKM_GOSTR3410_WITH_GOSTR3411_12_256: the token hashes (Streebog-256) and signs", derive},
		{"raw-only", gosttoken.Options{RawOnly: true}, "CKM_GOSTR3411_12_256 on the token (C_Digest), then CKM_GOSTR3410 over the hash", derive},
		{"one-step", gosttoken.Options{OneStepUnwrap: true}, "CKM_GOSTR3410_WITH_GOSTR3411_12_256: the token hashes (Streebog-256) and signs",
			[]string{"certificate login: yes (GOST 256 CryptoPro-A, one step: C_UnwrapKey with CKM_GOSTR3410_KEY_WRAP)",
				"derive+CKM_KDF_4357: not offered (no CKM_GOSTR3410_12_DERIVE)", "tried one-step: works", "tried derive+CKM_KDF_4357: fails: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := pkcs11test.NewGOST(t, 256, tc.o)
			code, out, stderr := runTokenCheck(t, nil, "--module", g.Module(), "--token-label", g.Label, "--key-label", g.Label, "--pin-file", g.PINFile())
			if code != 0 {
				t.Fatalf("exit %d: %s\n%s", code, stderr, out)
			}
			wantLines(t, out, append([]string{"trusted authentication: yes (GOST 256", tc.uses, "result: every function the key allows works"}, tc.login...)...)
			t.Logf("\n%s", out)
		})
	}
	t.Run("wrong PIN", func(t *testing.T) {
		g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
		bad := filepath.Join(t.TempDir(), "pin")
		os.WriteFile(bad, []byte("9999\n"), 0o600)
		code, out, stderr := runTokenCheck(t, nil, "--module", g.Module(), "--token-label", g.Label, "--key-label", g.Label, "--pin-file", bad)
		if code != cmdutil.ExitFailure || out != "" {
			t.Fatalf("exit %d (want 1), stdout %q", code, out)
		}
		oneLine(t, stderr, "rejected the PIN")
		if n := g.Tries(t); n != 1 {
			t.Errorf("%d wrong tries recorded, want 1", n)
		}
	})
}

func TestTokenCheckBadInput(t *testing.T) {
	tk := pkcs11test.NewWith(t, pkcs11test.Options{Extra: []softhsm.KeySpec{
		{Type: softhsm.RSA2048, Label: "nocert", ID: []byte{3}, NoCert: true},
		{Type: softhsm.RSA2048, Label: "nosign", ID: []byte{4}, CommonName: "no sign"},
	}})
	forbidSign(t, tk, "nosign")
	sel := []string{"--module", tk.Module, "--token-label", tk.Label, "--pin-file", tk.PINFile}
	t.Run("not a module", func(t *testing.T) {
		notMod := filepath.Join(t.TempDir(), "lib.so")
		os.WriteFile(notMod, []byte("not a library"), 0o644)
		code, out, stderr := runTokenCheck(t, nil, "--module", notMod, "--pin-file", tk.PINFile)
		if code != cmdutil.ExitFailure || out != "" {
			t.Fatalf("exit %d (want 1), stdout %q", code, out)
		}
		oneLine(t, stderr, "not a PKCS#11 module")
	})
	t.Run("key that cannot sign", func(t *testing.T) {
		code, out, stderr := runTokenCheck(t, nil, append(sel, "--key-label", "nosign")...)
		if code != cmdutil.ExitFailure {
			t.Fatalf("exit %d (want 1): %s", code, stderr)
		}
		wantLines(t, out, `trusted authentication: no: key "nosign" may not sign (CKA_SIGN is false)`, "certificate login: yes", "result: FAILED")
		oneLine(t, stderr, `token check: trusted authentication: key "nosign" may not sign (CKA_SIGN is false)`)
	})
	t.Run("key without a certificate", func(t *testing.T) {
		code, out, stderr := runTokenCheck(t, nil, append(sel, "--key-label", "nocert")...)
		if code != cmdutil.ExitFailure {
			t.Fatalf("exit %d (want 1): %s", code, stderr)
		}
		wantLines(t, out, "certificate: none: certificate not found", "trusted authentication: no: certificate not found")
		oneLine(t, stderr, "token check: trusted authentication: certificate not found")
	})
	t.Run("bad flags", func(t *testing.T) {
		code, _, stderr := runTokenCheck(t, nil, append(sel, "--key-label", "rsa", "--rounds", "0")...)
		if code != cmdutil.ExitBadInput {
			t.Fatalf("exit %d (want 2): %s", code, stderr)
		}
		oneLine(t, stderr, "--rounds 0: want 1 to 100")
		code, _, stderr = runTokenCheck(t, nil, append(sel, "--key-label", "rsa", "--removal", "--removal-timeout", "0s")...)
		if code != cmdutil.ExitBadInput {
			t.Fatalf("exit %d (want 2): %s", code, stderr)
		}
		oneLine(t, stderr, "--removal-timeout 0s: want 1s to 1h")
		code, _, stderr = runTokenCheck(t, nil, append(sel, "--key-id", "zz")...)
		if code != cmdutil.ExitBadInput {
			t.Fatalf("exit %d (want 2): %s", code, stderr)
		}
	})
}

// forbidSign sets CKA_SIGN false on the private key labelled label.
func forbidSign(t *testing.T, tk *pkcs11test.Token, label string) {
	t.Helper()
	ctx, release, err := pkcs11.ProvisioningContext(tk.Module)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	slots, err := ctx.GetSlotList(true)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		ti, err := ctx.GetTokenInfo(s)
		if err != nil || strings.TrimRight(ti.Label, " ") != tk.Label {
			continue
		}
		sh, err := ctx.OpenSession(s, p11.CKF_SERIAL_SESSION|p11.CKF_RW_SESSION)
		if err != nil {
			t.Fatal(err)
		}
		defer ctx.CloseSession(sh)
		if err := ctx.Login(sh, p11.CKU_USER, tk.PIN); err != nil && err != p11.Error(p11.CKR_USER_ALREADY_LOGGED_IN) {
			t.Fatal(err)
		}
		if err := ctx.FindObjectsInit(sh, []*p11.Attribute{p11.NewAttribute(p11.CKA_CLASS, p11.CKO_PRIVATE_KEY), p11.NewAttribute(p11.CKA_LABEL, label)}); err != nil {
			t.Fatal(err)
		}
		hs, _, err := ctx.FindObjects(sh, 2)
		ctx.FindObjectsFinal(sh)
		if err != nil || len(hs) != 1 {
			t.Fatalf("find key %q: %v (%d found)", label, err, len(hs))
		}
		if err := ctx.SetAttributeValue(sh, hs[0], []*p11.Attribute{p11.NewAttribute(p11.CKA_SIGN, false)}); err != nil {
			t.Fatalf("set CKA_SIGN false: %v", err)
		}
		return
	}
	t.Fatalf("token %q not found", tk.Label)
}

func TestTokenCheckTPM(t *testing.T) {
	start := time.Now()
	tk := pkcs11test.NewTPM(t)
	t.Logf("the TPM token took %v to make", time.Since(start))
	code, out, stderr := runTokenCheck(t, nil, "--module", tk.Module, "--token-label", tk.Label, "--key-label", "rsa", "--pin-file", tk.PINFile)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, out)
	}
	wantLines(t, out, "trusted authentication: yes (RSA 2048", "result: every function the key allows works")
	t.Logf("\n%s", out)
}

// TestTokenCheckCard: the check on the card rig (a card behind pcscd and
// OpenSC), then --removal as a script runs it, stdin not a terminal: the
// card taken out when the command says to remove it and put back when it
// says to reinsert it.
func TestTokenCheckCard(t *testing.T) {
	t.Parallel()
	card := pkcs11test.NewCard(t, pkcs11test.CardOptions{ForProcesses: true})
	sel := []string{"--module", card.Module, "--token-label", card.Label, "--key-label", card.KeyLabel, "--pin-file", card.PINFile}
	code, out, stderr := runTokenCheck(t, card.Env, sel...)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, out)
	}
	wantLines(t, out, `token: "`+card.Label+`" (serial `+card.Serial, "trusted authentication: yes (RSA 2048, CKM_RSA_PKCS",
		"certificate login: yes (RSA 2048, CKM_RSA_PKCS decryption", "result: every function the key allows works")
	t.Logf("\n%s", out)

	out, all := removalRun(t, card, sel...)
	wantLines(t, out, "removal: the reader asked every 50 ms (C_GetSlotInfo), times from the start of polling",
		"  signature after reinsertion: yes (a new session, one login, verified against the certificate): ",
		"result: every function the key allows works")
	var times []string
	for _, re := range []string{`removed: reported after ([0-9.]+) ms \(slot \d+: `, `reinserted: seen after ([0-9.]+) ms \(token "` + card.Label + `", serial `} {
		m := regexp.MustCompile(re).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("the report lacks %s:\n%s", re, out)
		}
		times = append(times, m[1]+" ms")
	}
	if n := card.TriesLeft(t); n != 3 {
		t.Errorf("the card has %d PIN tries left, want 3", n)
	}
	if strings.Contains(out+all, card.PIN) {
		t.Errorf("the output holds the PIN")
	}
	t.Logf("removal reported after %s, the card seen again after %s; stderr:\n%s\n%s", times[0], times[1], all, out)

	out, _ = removalRun(t, card, append(sel, "--json")...)
	var r tokencmd.CheckReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	rm := r.Removal
	if !r.OK || rm == nil || rm.Interactive || rm.PollMS != 50 || !rm.Removed.Seen || rm.Removed.AfterMS <= 0 || !rm.Reinserted.Seen ||
		rm.Reinserted.AfterMS <= 0 || rm.Reinserted.Slot == nil || !rm.Signature.Works || !rm.OK {
		t.Fatalf("--removal --json: %s", out)
	}
	t.Logf("--json: removal reported after %.1f ms, the card seen again after %.1f ms, a signature after %.1f ms",
		rm.Removed.AfterMS, rm.Reinserted.AfterMS, rm.Signature.TookMS)
	if n := card.TriesLeft(t); n != 3 {
		t.Errorf("the card has %d PIN tries left, want 3", n)
	}
}

// removalRun runs `token check --removal` on the card with stdin not a
// terminal, takes the card out when the command says to remove it and
// puts it back when it says to reinsert it, and returns stdout and stderr.
// It fails the test unless the command exits 0 having asked for both.
func removalRun(t *testing.T, card *pkcs11test.Card, args ...string) (string, string) {
	t.Helper()
	cmd := signagent(t, card.Env, append([]string{"token", "check", "--rounds", "1", "--removal", "--removal-timeout", "30s"}, args...)...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil { // the test failed before it ended
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	// Both waits are 30 s; the check before them a few seconds.
	kill := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	defer kill.Stop()
	var lines []string
	removed, inserted := false, false
	for sc := bufio.NewScanner(errPipe); sc.Scan(); {
		l := sc.Text()
		lines = append(lines, l)
		switch {
		case strings.Contains(l, "remove the card") && !removed:
			card.Remove(t)
			removed = true
		case strings.Contains(l, "reinsert the card") && removed && !inserted:
			card.Insert(t)
			inserted = true
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	all := strings.Join(lines, "\n")
	if err != nil || !removed || !inserted {
		t.Fatalf("--removal: %v (asked to remove: %v, to reinsert: %v); stderr:\n%s\nstdout:\n%s", err, removed, inserted, all, stdout.String())
	}
	return stdout.String(), all
}
