package trusted_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/trusted"
)

type captured struct {
	method, path, rawQuery, ctype, ua, accept string
	body                                      []byte
}

// TestWireFormat pins what goes on the wire, as the specification and the
// wire notes describe it: paths, kind-named credential, percent-encoded
// timestamp, parameter names per step, raw DER body, headers.
func TestWireFormat(t *testing.T) {
	var mu sync.Mutex
	var got []captured
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, captured{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), r.Header.Get("User-Agent"), r.Header.Get("Accept"), b})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		switch r.URL.Path {
		case "/prefix/auth/v5.16/authenticate-by-truster":
			io.WriteString(w, `{"Key":"FE43","Link":{"Rel":"Send key to this link","Href":"x"}}`)
		case "/prefix/auth/v5.16/approve-truster":
			io.WriteString(w, `{"Sid":"AAAA"}`)
		}
	}))
	defer srv.Close()

	e := newEnv(t, nil) // for the SoftHSM key
	c, err := trusted.New(trusted.Config{BaseURL: srv.URL + "/prefix/", APIKey: apiKey, Settings: httpx.Settings{UserAgent: "signagent/1.2.3", Timeout: 5 * time.Second},
		Signer: &signer.CMS{Key: e.key, Cert: e.key.Certificate()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cred := canonical.Credential{Kind: canonical.SNILS, Value: userSNILS}
	if err := c.Link(ctx, "crm 42", canonical.Credential{Kind: canonical.Phone, Value: userPhone}); err != nil {
		t.Fatal(err)
	}
	s, err := c.Session(ctx, cred, "crm 42")
	if err != nil || s.Sid != "AAAA" {
		t.Fatalf("%+v %v", s, err)
	}
	if len(got) != 3 {
		t.Fatalf("%d requests", len(got))
	}
	for i, want := range []struct {
		method, path, query, ctype string
	}{
		{"PUT", "/prefix/auth/v5.16/register-external-service-id", `^api-key=` + apiKey + `&serviceUserId=crm%2042&phone=9161234567$`, ""},
		{"POST", "/prefix/auth/v5.16/authenticate-by-truster", `^apiKey=` + apiKey + `&snils=11223344595&timestamp=\d\d\.\d\d\.\d{4}%20\d\d%3A\d\d%3A\d\d&serviceUserId=crm%2042$`, "application/octet-stream"},
		{"POST", "/prefix/auth/v5.16/approve-truster", `^key=FE43&id=11223344595&apiKey=` + apiKey + `$`, ""},
	} {
		g := got[i]
		if g.method != want.method || g.path != want.path || !regexp.MustCompile(want.query).MatchString(g.rawQuery) || g.ctype != want.ctype {
			t.Errorf("request %d: %s %s?%s (%s)", i, g.method, g.path, g.rawQuery, g.ctype)
		}
		if g.ua != "signagent/1.2.3" || g.accept != "application/json" {
			t.Errorf("request %d headers: UA %q Accept %q", i, g.ua, g.accept)
		}
	}
	// Step 1's body is the raw DER of a detached signature over the text the
	// query describes.
	stamp := regexp.MustCompile(`timestamp=([^&]+)`).FindStringSubmatch(got[1].rawQuery)[1]
	ts, err := canonical.ParseTimestamp(regexp.MustCompile(`%20`).ReplaceAllString(regexp.MustCompile(`%3A`).ReplaceAllString(stamp, ":"), " "))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := signer.Verify(got[1].body, canonical.Text(apiKey, cred, ts), nil); err != nil {
		t.Fatalf("the body is not a detached signature over the text: %v", err)
	}
	if len(got[0].body) != 0 || len(got[2].body) != 0 {
		t.Fatal("link or approve sent a body")
	}
}
