package trustedcmd_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/clitest"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/emulator/emulatortest"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/signer/signertest"
)

const apiKey = "0F6C2E5B-9D4A-4C1E-8A2B-7E3D1F0A9B8C"

// TestTrustedFamily drives the family's commands that need no token
// against the emulator's trusted side: canonical writes the signed text,
// link links a user found by phone, and sign refuses a missing API key
// before it would touch the token (there is none here).
func TestTrustedFamily(t *testing.T) {
	clitest.Isolate(t)
	// The partner's certificate: a key in memory, as no signature is made.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cert := signertest.NewCert(t, key, signertest.CertOptions{CommonName: "partner"})
	emu := emulatortest.New(t, &emulator.Config{
		Partners: []emulator.Partner{{Name: "p", APIKey: apiKey, CanLinkByPhone: true, Certificates: []string{string(signertest.PEM(cert))}}},
		Users:    []emulator.User{{ID: "u1", Phone: "9161234567"}},
	})
	keyFile := filepath.Join(t.TempDir(), "api-key")
	if err := os.WriteFile(keyFile, []byte(apiKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("canonical", func(t *testing.T) {
		code, out, stderr := clitest.Run(t, "", "trusted", "canonical", "--phone", "+7 (916) 123-45-67", "--timestamp", "01.02.2024 10:00:00", "--api-key-file", keyFile)
		if code != 0 || !strings.Contains(out, "apikey="+strings.ToLower(apiKey)) || !strings.Contains(out, "id=9161234567") || !strings.Contains(out, "01.02.2024 10:00:00") {
			t.Fatalf("exit %d, text %q, stderr %q", code, out, stderr)
		}
	})
	t.Run("link", func(t *testing.T) {
		code, out, stderr := clitest.Run(t, "", "trusted", "link", "--phone", "9161234567", "--service-user-id", "crm-42", "--trusted-url", emu.URL(), "--api-key-file", keyFile)
		if code != 0 || !strings.Contains(out, "to service user id crm-42") || strings.Contains(out+stderr, apiKey) {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
		}
	})
	t.Run("link refused", func(t *testing.T) {
		code, _, stderr := clitest.Run(t, "", "trusted", "link", "--phone", "9160000000", "--service-user-id", "crm-43", "--trusted-url", emu.URL(), "--api-key-file", keyFile)
		if code != cmdutil.ExitRefused {
			t.Fatalf("an unknown phone: exit %d, want %d; stderr %q", code, cmdutil.ExitRefused, stderr)
		}
	})
	t.Run("verify", func(t *testing.T) {
		// A signature made in memory with the partner's key (a software
		// key: verify reads files, whatever signed them).
		dir := t.TempDir()
		text := []byte("apikey=x\r\nid=9161234567\r\ntimestamp=01.02.2024 10:00:00\r\n")
		der, err := (&signer.CMS{Key: key, Cert: cert, Options: signer.Options{Hash: crypto.SHA256}}).SignText(t.Context(), text, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		sig, content, changed := filepath.Join(dir, "sig.der"), filepath.Join(dir, "text"), filepath.Join(dir, "changed")
		os.WriteFile(sig, der, 0o600)
		os.WriteFile(content, text, 0o600)
		os.WriteFile(changed, append([]byte("x"), text...), 0o600)
		code, out, stderr := clitest.Run(t, "", "trusted", "verify", "--signature", sig, "--content", content, "--json")
		if code != 0 || !strings.Contains(out, `"valid": true`) || !strings.Contains(out, canonical.ThumbprintOf(cert)) {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
		}
		if code, out, _ := clitest.Run(t, "", "trusted", "verify", "--signature", sig, "--content", changed); code == 0 {
			t.Fatalf("a changed content verified: %q", out)
		}
	})
	t.Run("sign without API key", func(t *testing.T) {
		t.Setenv("SIGNAGENT_API_KEY", "")
		code, out, stderr := clitest.Run(t, "", "trusted", "sign", "--phone", "9161234567", "--format", "base64")
		if code != cmdutil.ExitBadInput || out != "" || !strings.Contains(stderr, "API key") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
		}
	})
}
