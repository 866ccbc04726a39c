package legacy

import (
	"strings"
	"testing"
)

// The emulator reads the header as the wire notes spell it, strictly: what
// a careless client might send is refused, so that the client's own tests
// against the emulator catch it.
func TestParseServiceAuth(t *testing.T) {
	good := map[string]serviceAuth{
		"ServiceAuth ddauth_api_client_id=k":                         {key: "k"},
		"ServiceAuth ddauth_api_client_id=k,ddauth_token=dG9rZW4=":   {key: "k", token: "dG9rZW4="},
		"ServiceAuth ddauth_token=a==,ddauth_api_client_id=api-1234": {key: "api-1234", token: "a=="},
	}
	for h, want := range good {
		if got, ok := parseServiceAuth(h); !ok || got != want {
			t.Fatalf("%q: got %+v %v, want %+v", h, got, ok, want)
		}
	}
	for _, h := range []string{
		"",
		"ServiceAuth",
		"ServiceAuth ",
		"serviceauth ddauth_api_client_id=k",
		"ServiceAuth  ddauth_api_client_id=k",
		"Bearer ddauth_api_client_id=k",
		"ServiceAuth ddauth_api_client_id=k, ddauth_token=t",
		"ServiceAuth ddauth_api_client_id=k,ddauth_token=",
		"ServiceAuth ddauth_api_client_id=k,ddauth_token=t,ddauth_token=t",
		"ServiceAuth ddauth_api_client_id=k,other=x",
		"ServiceAuth ddauth_token=t",
		"ServiceAuth ddauth_api_client_id=\"k\"x,",
	} {
		if got, ok := parseServiceAuth(h); ok {
			t.Fatalf("%q accepted as %+v", h, got)
		}
	}
	for key, want := range map[string]string{
		"api-0F6C2E5B\n": "", "": "empty", "a b": "white space", "a,b": "comma", "ключ": "printable ASCII",
		strings.Repeat("k", 513): "longer than 512",
	} {
		_, why := checkDeveloperKey(key)
		if (want == "") != (why == "") || !strings.Contains(why, want) {
			t.Fatalf("%q: %q, want %q", key, why, want)
		}
	}
}
