package main

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/pkcs11/softhsm"
	"github.com/signagent/signagent/signer/signertest"
)

// TestLegacyTokenKeyInputs drives certificate login through run() against
// a real SoftHSM token: a key that may not decrypt and an EC key are bad
// input (exit 2) refused before the service is asked; a challenge that is
// not for our certificate or not an envelope at all (from a stand-in
// service: the emulator cannot be made to send one) is the service failing
// (exit 4). Each is one line without a secret.
func TestLegacyTokenKeyInputs(t *testing.T) {
	tk := pkcs11test.NewWith(t, pkcs11test.Options{Extra: []softhsm.KeySpec{{Type: softhsm.RSA2048, Label: "sign-only", ID: []byte{9}, NoDecrypt: true}}})
	const devKey = "testClient-77aa88bb99"
	emu := startEmulator(t, &emulator.Config{Developers: []emulator.Developer{{Key: devKey}}})
	t.Setenv("SIGNAGENT_DEVELOPER_KEY", devKey)
	// Another party's certificate; its key is in memory because only the
	// envelope addressed to it matters here.
	otherKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	notForUs, err := envelope.Seal([]byte("random"), signertest.NewCert(t, otherKey, signertest.CertOptions{CommonName: "someone else"}), false)
	if err != nil {
		t.Fatal(err)
	}
	fake := func(body []byte) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	for _, tc := range []struct {
		name, key, url string
		code           int
		want           string
	}{
		{"may not decrypt", "sign-only", emu.URL(), cmdutil.ExitBadInput, "may not decrypt (CKA_DECRYPT is false)"},
		{"EC key", "ec", emu.URL(), cmdutil.ExitBadInput, "not an RSA key"},
		{"unknown certificate", "rsa", emu.URL(), cmdutil.ExitRefused, "HTTP 401 Auth.CertificateNotFound"},
		{"not for us", "rsa", fake(notForUs), cmdutil.ExitTransport, "not addressed to this certificate"},
		{"truncated", "rsa", fake(notForUs[:40]), cmdutil.ExitTransport, "not a CMS EnvelopedData"},
		{"HTML", "rsa", fake([]byte("<html>hello</html>")), cmdutil.ExitTransport, "not a CMS EnvelopedData"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{"signagent", "legacy", "token", "--by", "certificate", "--business-url", tc.url, "--module", tk.Module,
				"--token-label", tk.Label, "--key-label", tc.key, "--pin-file", tk.PINFile, "--attempts", "1"}, strings.NewReader(""), &stdout, &stderr)
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			last := lines[len(lines)-1]
			if code != tc.code || !strings.HasPrefix(last, "signagent: ") || !strings.Contains(last, tc.want) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", code, tc.code, stderr.String(), tc.want)
			}
			if strings.Contains(stderr.String(), devKey) || strings.Contains(stderr.String(), tk.PIN) || stdout.Len() != 0 {
				t.Fatalf("secret or output: %q %q", stderr.String(), stdout.String())
			}
		})
	}
	if n := emu.Stats().Requests["Authenticate"]; n != 1 {
		t.Fatalf("the emulator was asked %d times; only the unknown certificate should have asked", n)
	}
}
