package inspect_test

import (
	"context"
	"encoding/hex"
	"testing"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/inspect"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// TestListing runs on every real token pkcs11test makes (SoftHSM, and the
// others the machine has).
func TestListing(t *testing.T) { pkcs11test.Each(t, testListing) }

func testListing(t *testing.T, tk *pkcs11test.Token) {
	tokens, err := pkcs11.ListTokens(context.Background(), tk.Module)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, ti := range tokens {
		if ti.Label == tk.Label && ti.Serial == tk.Serial && ti.Initialized {
			found = true
		}
	}
	if !found {
		t.Fatalf("token not listed: %+v", tokens)
	}
	objs, err := inspect.ListObjects(context.Background(), tk.Module, tokeninfo.TokenSelector{Label: tk.Label}, tk.PIN)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]inspect.Object{}
	for _, o := range objs {
		seen[o.Class+"/"+o.Label] = o
	}
	if o := seen["private-key/rsa"]; o.KeyType != "RSA" || o.Bits != 2048 || o.ID != hex.EncodeToString(tk.RSA.ID) {
		t.Fatalf("rsa private key: %+v", o)
	}
	for _, label := range []string{"rsa", "ec"} {
		o := seen["private-key/"+label]
		if o.Sensitive == nil || !*o.Sensitive || o.Extractable == nil || *o.Extractable {
			t.Fatalf("private key %s must be sensitive and not extractable: %+v", label, o)
		}
	}
	if o := seen["private-key/ec"]; o.Curve != "P-256" {
		t.Fatalf("ec private key: %+v", o)
	}
	if o := seen["certificate/rsa"]; o.Thumbprint != canonical.ThumbprintOf(tk.RSA.Cert) || o.Subject == "" || o.NotAfter.IsZero() {
		t.Fatalf("rsa certificate: %+v", o)
	}
	// Without the PIN the private keys stay hidden.
	objs, err = inspect.ListObjects(context.Background(), tk.Module, tokeninfo.TokenSelector{Label: tk.Label}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Class == "private-key" {
			t.Fatalf("private key listed without login: %+v", o)
		}
	}
}
