package legacy

import (
	"errors"
	"testing"
)

func TestHeaderBytes(t *testing.T) {
	const key, tok = "api-3f2a0c1e-5b7d-4e8f-9a01-23456789abcd", "dGhpcyBpcyBhIHRva2Vu/+Q=="
	if got, want := Header(key, tok), "ServiceAuth ddauth_api_client_id=api-3f2a0c1e-5b7d-4e8f-9a01-23456789abcd,ddauth_token=dGhpcyBpcyBhIHRva2Vu/+Q=="; got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if got := AuthenticateHeader(key); got != "ServiceAuth ddauth_api_client_id="+key {
		t.Fatalf("got %q", got)
	}
	k, tk, err := ParseHeader(Header(key, tok))
	if err != nil || k != key || tk != tok {
		t.Fatalf("round trip: %q %q %v", k, tk, err)
	}
	if k, tk, err := ParseHeader(AuthenticateHeader(key)); err != nil || k != key || tk != "" {
		t.Fatalf("key alone: %q %q %v", k, tk, err)
	}
}

func TestParseHeaderRefuses(t *testing.T) {
	for _, h := range []string{
		"",
		"Bearer abc",
		"ServiceAuth",
		"serviceauth ddauth_api_client_id=k",
		"ServiceAuth  ddauth_api_client_id=k",
		"ServiceAuth ddauth_api_client_id=k, ddauth_token=t",
		"ServiceAuth ddauth_token=t",
		"ServiceAuth ddauth_api_client_id=",
		"ServiceAuth ddauth_api_client_id=k,ddauth_api_client_id=j",
		"ServiceAuth ddauth_api_client_id=k,other=x",
		"ServiceAuth ddauth_api_client_id",
	} {
		if _, _, err := ParseHeader(h); !errors.Is(err, ErrHeader) {
			t.Errorf("%q: err = %v", h, err)
		}
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add("ServiceAuth ddauth_api_client_id=k,ddauth_token=t==")
	f.Fuzz(func(t *testing.T, h string) {
		k, tok, err := ParseHeader(h)
		if err != nil {
			return
		}
		// What parses, rebuilt, parses to the same key and token.
		rebuilt := AuthenticateHeader(k)
		if tok != "" {
			rebuilt = Header(k, tok)
		}
		k2, tok2, err := ParseHeader(rebuilt)
		if err != nil || k2 != k || tok2 != tok {
			t.Fatalf("%q parsed to %q, %q; rebuilt %q parsed to %q, %q, %v", h, k, tok, rebuilt, k2, tok2, err)
		}
	})
}
