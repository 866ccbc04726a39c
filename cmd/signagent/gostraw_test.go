package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/tokencmd"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/pkcs11/gostkeyx"
	"github.com/signagent/signagent/pkcs11/gosttoken"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
)

// gostCardLike is a GOST test token made to look like a GOST card behind
// OpenSC: only the raw CKM_GOSTR3410, no certificate and no public key
// object shown. Its certificate is kept in a file of its own.
func gostCardLike(t *testing.T) (*pkcs11test.GOSTToken, string) {
	t.Helper()
	g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
	if err := g.SetFaults(pkcs11test.GOSTCardNoCertNoPub...); err != nil {
		t.Fatal(err)
	}
	cert := filepath.Join(t.TempDir(), "partner.der")
	if err := os.WriteFile(cert, g.Cert.Raw, 0o644); err != nil { // DER: PEM is read too
		t.Fatal(err)
	}
	return g, cert
}

// token check on a raw-only GOST token: trusted authentication works by
// Streebog-256 here and the raw mechanism, against the certificate from
// the file; certificate login is not offered, which is no failure (exit 0).
func TestTokenCheckGOSTRawOnly(t *testing.T) {
	g, cert := gostCardLike(t)
	sel := []string{"--module", g.Module(), "--token-label", g.Label, "--key-label", g.Label, "--pin-file", g.PINFile(), "--certificate-file", cert}
	code, out, stderr := runTokenCheck(t, nil, sel...)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, out)
	}
	wantLines(t, out, "trusted authentication: yes (GOST 256 CryptoPro-A, Streebog-256 in signagent, then raw CKM_GOSTR3410 on the token)",
		"a signature verified against the certificate from "+cert,
		"thumbprint "+canonical.ThumbprintOf(g.Cert)+", valid until ",
		"\ncertificate login: not offered by this token (no GOST key agreement; a vendor module is needed, see docs/tokens.md)\n",
		"result: every function the key allows works")
	code, out, stderr = runTokenCheck(t, nil, append(sel, "--json")...)
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, stderr)
	}
	var r tokencmd.CheckReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !r.OK || r.Certificate == nil || r.Certificate.Source != cert || !r.Functions[0].Works ||
		!strings.Contains(r.Functions[0].Uses, "Streebog-256 in signagent") || r.Functions[1].Allowed || r.Functions[1].Tried ||
		r.Functions[1].Why != gostkeyx.NotOffered {
		t.Fatalf("report: %s", out)
	}
	if g.Tries(t) != 0 {
		t.Fatal("a PIN try was spent")
	}
}

// Trusted authentication with a raw-only GOST token and the certificate
// from a file: `sign` makes a CMS that OpenSSL's gost engine and GnuTLS
// verify, `session` is accepted by the emulator, and the agent's
// /v1/signatures, /readyz and audit lines name the file's certificate.
func TestGOSTRawOnlyTrusted(t *testing.T) {
	g, cert := gostCardLike(t)
	emu := startEmulator(t, &emulator.Config{
		Partners: []emulator.Partner{{Name: "p", APIKey: testAPIKey, Certificates: []string{string(signertest.PEM(g.Cert))}}},
		Users:    []emulator.User{{ID: "u1", Phone: "9161234567", Linked: []string{"p:crm-42"}}},
	})
	thumb := canonical.ThumbprintOf(g.Cert)
	env := []string{"SIGNAGENT_API_KEY=" + testAPIKey, "SIGNAGENT_PKCS11_MODULE=" + g.Module(), "SIGNAGENT_PIN_FILE=" + g.PINFile(),
		"SIGNAGENT_TOKEN_LABEL=" + g.Label, "SIGNAGENT_CERTIFICATE_FILE=" + cert}

	dir := t.TempDir()
	sig, text := filepath.Join(dir, "sig.der"), filepath.Join(dir, "text")
	if code, stderr, _ := runBinary(t, signagent(t, env, "trusted", "sign", "--phone", "9161234567", "--out", sig, "--text-out", text)); code != 0 {
		t.Fatalf("sign: exit %d: %s", code, stderr)
	}
	der, _ := os.ReadFile(sig)
	content, _ := os.ReadFile(text)
	signertest.RequireGOSTExternalVerify(t, der, content, g.Cert)

	out, err := signagent(t, env, "trusted", "session", "--phone", "9161234567", "--service-user-id", "crm-42", "--trusted-url", emu.URL()).Output()
	if err != nil || len(strings.TrimSpace(string(out))) != 43 {
		t.Fatalf("session: %v: %q", err, out)
	}

	sock := filepath.Join(dir, "a.sock")
	// The audit lines on stderr ("-"): a file's are written in batches.
	// serve takes the certificate's file from its settings file.
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte("certificate-file: "+cert+"\n"), 0o600)
	a := startServe(t, signagent(t, env[:len(env)-1], "serve", "--config", cfg, "--listen", "unix:"+sock, "--audit-log", "-", "--trusted-url", emu.URL()), sock)
	code, body := a.do("POST", "/v1/signatures", `{"phone":"9161234567"}`)
	if code != 200 || !strings.Contains(body, `"certificateThumbprint":"`+thumb+`"`) {
		t.Fatalf("/v1/signatures: %d %s\n%s", code, body, a.stderr.String())
	}
	if code, body := a.do("GET", "/readyz", ""); code != 200 || !strings.Contains(body, thumb) {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	if s := a.stderr.String(); !strings.Contains(s, `"operation":"sign","outcome":"ok"`) || !strings.Contains(s, `"keyThumbprint":"`+thumb+`"`) {
		t.Fatalf("no audit line of the signature naming %s:\n%s", thumb, s)
	}
	if s := a.stderr.String(); strings.Count(s, "Streebog-256 in signagent, then raw CKM_GOSTR3410 on the token") != 1 {
		t.Fatalf("the way is not logged once:\n%s", s)
	}
}

// --cert, SIGNAGENT_CERT and the settings key cert still work, each with
// the renames' one line on stderr naming the new name (settings.Renamed);
// given with --certificate-file, the new name wins, as for every rename.
func TestCertificateFileOldNames(t *testing.T) {
	g, cert := gostCardLike(t)
	sel := []string{"--module", g.Module(), "--token-label", g.Label, "--key-label", g.Label, "--pin-file", g.PINFile()}
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(cfg, []byte("cert: "+cert+"\n"), 0o600)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		says string
	}{
		{"--cert", nil, []string{"--cert", cert}, renameLine("--cert", "--certificate-file")},
		{"SIGNAGENT_CERT", []string{"SIGNAGENT_CERT=" + cert}, nil, renameLine("SIGNAGENT_CERT", "SIGNAGENT_CERTIFICATE_FILE")},
		{"settings key cert", nil, []string{"--config", cfg}, renameLine("cert (in "+cfg+")", "certificate-file")},
		{"--cert beside --certificate-file", nil, []string{"--certificate-file", cert, "--cert", g.CertFile()}, renameLine("--cert", "--certificate-file")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runTokenCheck(t, tc.env, append(sel, tc.args...)...)
			if code != 0 || stderr != tc.says || !strings.Contains(out, "from "+cert) {
				t.Fatalf("exit %d, stderr %q (want %q)\n%s", code, stderr, tc.says, out)
			}
		})
	}
}

// Bad inputs of a raw-only token through the CLI: each one line, exit 2
// (a certificate that is not the key's, not a certificate, GOST-2001,
// expired) or 1 with no signature made (no GOST mechanism at all), and
// certificate login asked of it says it is not offered.
func TestGOSTRawOnlyBadInput(t *testing.T) {
	g, cert := gostCardLike(t)
	other := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
	notCert := filepath.Join(t.TempDir(), "not.pem")
	os.WriteFile(notCert, []byte("not a certificate\n"), 0o600)
	env := []string{"SIGNAGENT_API_KEY=" + testAPIKey, "SIGNAGENT_PKCS11_MODULE=" + g.Module(), "SIGNAGENT_PIN_FILE=" + g.PINFile(), "SIGNAGENT_TOKEN_LABEL=" + g.Label}
	for _, tc := range []struct {
		name string
		cert string
		code int
		want string
	}{
		{"another key's certificate", other.CertFile(), cmdutil.ExitBadInput, canonical.ThumbprintOf(other.Cert)},
		{"not a certificate", notCert, cmdutil.ExitBadInput, "holds no certificate"},
		{"GOST-2001 certificate", pkcs11test.GOST2001Certificate(t), cmdutil.ExitBadInput, "GOST R 34.10-2001 certificate"},
		{"expired certificate", g.ExpiredCertificate(t), cmdutil.ExitBadInput, "expired on 2021-01-01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "sig.der")
			code, stderr, _ := runBinary(t, signagent(t, append(env, "SIGNAGENT_CERTIFICATE_FILE="+tc.cert), "sign", "--phone", "9161234567", "--out", out))
			if code != tc.code {
				t.Fatalf("exit %d (want %d): %s", code, tc.code, stderr)
			}
			oneLine(t, stderr, tc.want)
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Fatal("a signature file was written")
			}
		})
	}
	t.Run("certificate login", func(t *testing.T) {
		code, stderr, _ := runBinary(t, signagent(t, append(env, "SIGNAGENT_CERTIFICATE_FILE="+cert, "SIGNAGENT_DEVELOPER_KEY=testClient-77aa88bb99", "SIGNAGENT_BUSINESS_URL=http://127.0.0.1:9"),
			"header", "--scheme", "legacy", "--by", "certificate"))
		if code == 0 {
			t.Fatal("certificate login on a raw-only token succeeded")
		}
		oneLine(t, stderr, "certificate login is not offered by this token (no GOST key agreement; a vendor module is needed, see docs/tokens.md)")
	})
	t.Run("no GOST mechanism at all", func(t *testing.T) {
		g.SetFaults(pkcs11test.GOSTNoMechanismAtAll...)
		defer g.SetFaults(pkcs11test.GOSTCardNoCertNoPub...)
		code, stderr, _ := runBinary(t, signagent(t, append(env, "SIGNAGENT_CERTIFICATE_FILE="+cert), "sign", "--phone", "9161234567", "--format", "base64"))
		if code == 0 {
			t.Fatal("signed")
		}
		oneLine(t, stderr, "offers no GOST signature mechanism")
	})
	if g.Tries(t) != 0 {
		t.Fatal("a PIN try was spent")
	}
}
