package tokencmd

import (
	"context"
	"strings"
	"testing"

	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/inspect"
	"github.com/signagent/signagent/pkcs11/pkcs11test/fake"
)

// TestCapabilities: what token check says an RSA key can do, given the
// mechanisms a module lists. The fake token stands in for modules that
// offer less than SoftHSM does (a CKM_RSA_PKCS that only signs, none at
// all); SoftHSM's own list is checked in cmd/signagent's token check tests.
func TestCapabilities(t *testing.T) {
	f := fake.New(t)
	_, sel, _ := f.Setup(t, "1234")
	ctx := context.Background()
	k, err := pkcs11.Open(ctx, sel, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	mechs, err := inspect.Mechanisms(ctx, k.Token())
	if err != nil {
		t.Fatal(err)
	}
	caps := Capabilities(k, mechs)
	if caps[0].Function != FunctionTrusted || caps[1].Function != FunctionCertLogin {
		t.Fatalf("functions: %+v", caps)
	}
	if !caps[0].Allowed || !caps[0].Offered || caps[0].Why != "" || !caps[1].Allowed || !caps[1].Offered {
		t.Fatalf("capabilities with CKM_RSA_PKCS for both: %+v", caps)
	}

	// A module whose CKM_RSA_PKCS only signs, and that hashes itself.
	signOnly := []inspect.Mechanism{{Code: p11.CKM_RSA_PKCS, Name: "CKM_RSA_PKCS", CKF: p11.CKF_SIGN}, {Code: p11.CKM_SHA256_RSA_PKCS, CKF: p11.CKF_SIGN}}
	caps = Capabilities(k, signOnly)
	if caps[1].Offered || caps[1].Why != "the module has no CKM_RSA_PKCS decryption for this key" {
		t.Errorf("certificate login without decryption: %+v", caps[1])
	}
	if len(caps[0].Notes) != 1 || !strings.Contains(caps[0].Notes[0], "CKM_SHA256_RSA_PKCS") {
		t.Errorf("trusted authentication's notes: %q", caps[0].Notes)
	}
	caps = Capabilities(k, nil)
	if caps[0].Offered || caps[0].Why != "the module has no CKM_RSA_PKCS signing for this key" {
		t.Errorf("trusted authentication without mechanisms: %+v", caps[0])
	}
}
