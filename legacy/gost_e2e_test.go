package legacy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/emulator/emulatortest"
	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gosttoken"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
)

// gostEnv is an envelope's fields a test changes: the key transport is an
// OCTET STRING holding DER, parsed as a tree of its own.
type gostEnv struct {
	root, ed, recipients, ktri, eci, contentParams *signertest.TLV
	kt                                             *signertest.TLV // GostR3410-KeyTransport
}

func readGOSTEnv(t *testing.T, der []byte) *gostEnv {
	t.Helper()
	e := &gostEnv{root: signertest.ParseTLV(t, der)}
	e.ed = e.root.Kids[1].Kids[0]
	e.recipients = e.ed.Kids[1]
	e.ktri = e.recipients.Kids[0]
	e.kt = signertest.ParseTLV(t, e.ktri.Kids[3].Value)
	e.eci = e.ed.Kids[2]
	e.contentParams = e.eci.Kids[1].Kids[1]
	return e
}

func (e *gostEnv) der() []byte {
	e.ktri.Kids[3].Value = e.kt.DER()
	return e.root.DER()
}

// Paths into GostR3410-KeyTransport.
func (e *gostEnv) encKey() *signertest.TLV    { return e.kt.Kids[0].Kids[0] }
func (e *gostEnv) mac() *signertest.TLV       { return e.kt.Kids[0].Kids[1] }
func (e *gostEnv) wrapSet() *signertest.TLV   { return e.kt.Kids[1].Kids[0] }
func (e *gostEnv) ephemeral() *signertest.TLV { return e.kt.Kids[1].Kids[1] }
func (e *gostEnv) ukm() *signertest.TLV       { return e.kt.Kids[1].Kids[2] }

// The bad inputs of a GOST certificate login (issue 38): each is one clear
// line of the challenge class, nothing sent to AuthenticateConfirm, no PIN
// try spent, nothing left on the token; the token still logs in after.
// The envelopes are OpenSSL's (the gost engine), changed field by field,
// served by a stand-in for the service (the emulator seals only good ones).
func TestGOSTChallengeBadInput(t *testing.T) {
	g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
	g512 := pkcs11test.NewGOST(t, 512, gosttoken.Options{})
	other := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
	key, err := pkcs11.Open(context.Background(), g.Selection(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer key.Close()
	random := make([]byte, 32)
	rand.Read(random)
	fresh := func() *gostEnv { return readGOSTEnv(t, signertest.OpenSSLEncryptGOST(t, random, g.Cert, false)) }
	env512 := readGOSTEnv(t, signertest.OpenSSLEncryptGOST(t, random, g512.Cert, false))
	cases := map[string]struct {
		der  func() []byte
		want error
		line string
	}{
		"wrapped key changed": {func() []byte { e := fresh(); e.encKey().Value[5] ^= 1; return e.der() }, envelope.ErrChallenge, ""},
		"MAC changed":         {func() []byte { e := fresh(); e.mac().Value[0] ^= 1; return e.der() }, envelope.ErrChallenge, ""},
		"UKM of 7 bytes":      {func() []byte { e := fresh(); e.ukm().Value = e.ukm().Value[:7]; return e.der() }, envelope.ErrNotChallenge, "UKM (7 bytes, not 8)"},
		"unknown wrap parameter set": {func() []byte {
			e := fresh()
			e.wrapSet().Value = []byte{0x2a, 0x85, 0x03, 0x02, 0x02, 0x1f, 0x09} // 1.2.643.2.2.31.9
			return e.der()
		}, envelope.ErrNotChallenge, "key wrap parameter set 1.2.643.2.2.31.9 (unknown"},
		"unknown content parameter set": {func() []byte {
			e := fresh()
			e.contentParams.Kids[1].Value = []byte{0x2a, 0x85, 0x03, 0x02, 0x02, 0x1f, 0x09}
			return e.der()
		}, envelope.ErrNotChallenge, "parameter set 1.2.643.2.2.31.9 is unknown"},
		"ephemeral key off the curve": {func() []byte {
			e := fresh()
			point := e.ephemeral().Kids[1].Value // BIT STRING: 00, then OCTET STRING 04 40 x y
			point[len(point)-1] ^= 1
			return e.der()
		}, envelope.ErrNotChallenge, "not a point of its curve"},
		"ephemeral key of the other size": {func() []byte {
			e := fresh()
			e.kt.Kids[1].Kids[1] = env512.ephemeral()
			return e.der()
		}, envelope.ErrNotChallenge, "ephemeral key (on TC26-512-A, not on the certificate's curve CryptoPro-A)"},
		"two recipients": {func() []byte {
			e := fresh()
			e.recipients.Kids = append(e.recipients.Kids, e.ktri)
			return e.der()
		}, envelope.ErrNotChallenge, "it has 2 recipients; a challenge has one"},
		"KeyAgreeRecipientInfo": {func() []byte {
			e := fresh()
			e.recipients.Kids[0] = &signertest.TLV{Tag: 0xa1, Kids: e.ktri.Kids}
			return e.der()
		}, envelope.ErrNotChallenge, "a recipient that is not key transport"},
		"not the token's certificate": {func() []byte { return signertest.OpenSSLEncryptGOST(t, random, other.Cert, false) }, envelope.ErrNotForUs, ""},
		"content longer than a challenge": {func() []byte {
			return signertest.OpenSSLEncryptGOST(t, bytes.Repeat([]byte{7}, envelope.ChallengeSize+1), g.Cert, false)
		}, envelope.ErrNotChallenge, "the encrypted content is 33 bytes; a challenge's random is 32"},
		"content shorter than a challenge": {func() []byte {
			return signertest.OpenSSLEncryptGOST(t, bytes.Repeat([]byte{7}, envelope.ChallengeSize-1), g.Cert, false)
		}, envelope.ErrNotChallenge, "the encrypted content is 31 bytes; a challenge's random is 32"},
		"mask key present": {func() []byte {
			e := fresh()
			ek := e.kt.Kids[0]
			ek.Kids = []*signertest.TLV{ek.Kids[0], {Tag: 0x80, Value: make([]byte, 32)}, ek.Kids[1]}
			return e.der()
		}, envelope.ErrNotChallenge, "mask key (present"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var confirms atomic.Int32
			body := tc.der()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "AuthenticateConfirm") {
					confirms.Add(1)
					http.Error(w, "no", http.StatusForbidden)
					return
				}
				w.Write(body)
			}))
			defer srv.Close()
			c, err := legacy.New(legacy.Config{APIURL: srv.URL, DeveloperKey: devKey, Settings: httpx.Settings{Timeout: 5e9, Backoff: 1e6}, Log: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Certificate(context.Background(), g.Cert, key)
			if !errors.Is(err, tc.want) || strings.Contains(err.Error(), "\n") || confirms.Load() != 0 || !strings.Contains(err.Error(), tc.line) {
				t.Fatalf("want %v (%q), got %v (%d confirms)", tc.want, tc.line, err, confirms.Load())
			}
			if tc.want == envelope.ErrChallenge && err.Error() != "Authenticate (V3) type=certificate: the service's challenge: "+envelope.ErrChallenge.Error() {
				t.Fatalf("not the one error: %v", err)
			}
			if strings.Contains(err.Error(), canonical.ThumbprintOf(g.Cert)[:8]) && tc.want != envelope.ErrNotForUs {
				t.Fatalf("the error names more than it needs: %v", err)
			}
			if g.Tries(t) != 0 || g.GOSTObjects(t) != 0 || key.Token().Lost() != nil {
				t.Fatalf("tries %d, session keys %d, lost %v", g.Tries(t), g.GOSTObjects(t), key.Token().Lost())
			}
		})
	}
}

// A changed byte in the content cannot be seen before the service answers
// (CFB has no integrity): between signagent and the emulator, a stand-in
// flips one byte of the challenge's content; the token opens it to another
// random, the one AuthenticateConfirm it costs is refused by the service
// and reported plainly; the next login asks for a fresh challenge and
// works.
func TestGOSTChallengeContentChanged(t *testing.T) {
	g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
	key, err := pkcs11.Open(context.Background(), g.Selection(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer key.Close()
	emu := emulatortest.New(t, &emulator.Config{
		Developers: []emulator.Developer{{Name: "crm", Key: devKey}},
		Users:      []emulator.User{{ID: "u1", Thumbprints: []string{canonical.ThumbprintOf(g.Cert)}}},
	})
	target, _ := url.Parse(emu.URL())
	var flip atomic.Bool
	flip.Store(true)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(r *http.Response) error {
		if !strings.HasSuffix(r.Request.URL.Path, "/V3/Authenticate") || r.StatusCode != 200 || !flip.Load() {
			return nil
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		b[len(b)-3] ^= 0x40 // in the encrypted content, the envelope's last field
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		r.Header.Del("Content-Length")
		return nil
	}
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	c, err := legacy.New(legacy.Config{APIURL: srv.URL, DeveloperKey: devKey, Settings: httpx.Settings{Timeout: 5e9, Backoff: 1e6}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Certificate(context.Background(), g.Cert, key)
	var se *legacy.ServiceError
	if !errors.As(err, &se) || se.Call != "AuthenticateConfirm" || strings.Contains(err.Error(), "\n") {
		t.Fatalf("want the service's refusal of AuthenticateConfirm, got %v", err)
	}
	t.Logf("reported: %v", err)
	flip.Store(false)
	if _, err := c.Certificate(context.Background(), g.Cert, key); err != nil {
		t.Fatalf("the next login: %v", err)
	}
	st := emu.Stats()
	if st.Requests["Authenticate"] != 2 || st.Requests["AuthenticateConfirm"] != 2 || g.Tries(t) != 0 {
		t.Fatalf("requests %v, tries %d", st.Requests, g.Tries(t))
	}
}
