package uri

import (
	"errors"
	"testing"

	"github.com/signagent/signagent/pkcs11/tokenerr"
)

func TestParseURI(t *testing.T) {
	u, err := Parse("pkcs11:token=My%20Token;serial=ABC;object=signing%20key;id=%01%a2;type=private?module-path=/usr/lib/x.so&pin-source=file:/run/pin")
	if err != nil {
		t.Fatal(err)
	}
	if u.Token != "My Token" || u.Serial != "ABC" || u.Object != "signing key" || string(u.ID) != "\x01\xa2" ||
		u.ModulePath != "/usr/lib/x.so" || u.PINSource != "/run/pin" {
		t.Fatalf("%+v", u)
	}
	for _, bad := range []string{
		"token=x", "pkcs11:token=x;pin-value=1234", "pkcs11:token=x?pin-value=1234",
		"pkcs11:token=%zz", "pkcs11:nonsense", "pkcs11:color=red",
	} {
		if _, err := Parse(bad); !errors.Is(err, tokenerr.ErrBadURI) {
			t.Errorf("Parse(%q) err=%v", bad, err)
		}
	}
}

func FuzzParseURI(f *testing.F) {
	f.Add("pkcs11:token=a;object=b;id=%01?module-path=/x&pin-source=/p")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := Parse(s)
		if err == nil && u == nil {
			t.Fatal("nil URI without error")
		}
	})
}
