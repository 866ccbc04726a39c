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
	"github.com/signagent/signagent/hsmtest"
	"github.com/signagent/signagent/internal/gosttoken"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/pkcs11"
)

// tlv is a DER element as a tree, so that a test can change one field of
// an envelope and encode it again with every length right.
type tlv struct {
	tag   byte
	value []byte // a primitive's contents
	kids  []*tlv // a constructed element's
}

func parseTLV(t *testing.T, der []byte) *tlv {
	t.Helper()
	n, rest := readTLV(t, der)
	if len(rest) != 0 {
		t.Fatalf("bytes after one DER element: %x", rest)
	}
	return n
}

// readTLV reads one element (single-byte tags, definite lengths: DER).
func readTLV(t *testing.T, b []byte) (*tlv, []byte) {
	t.Helper()
	if len(b) < 2 {
		t.Fatalf("short DER: %x", b)
	}
	n := &tlv{tag: b[0]}
	l, hdr := int(b[1]), 2
	if l >= 0x80 {
		k := l & 0x7f
		l, hdr = 0, 2+k
		for _, x := range b[2 : 2+k] {
			l = l<<8 | int(x)
		}
	}
	body, rest := b[hdr:hdr+l], b[hdr+l:]
	if n.tag&0x20 == 0 {
		n.value = append([]byte{}, body...)
		return n, rest
	}
	for len(body) > 0 {
		var kid *tlv
		kid, body = readTLV(t, body)
		n.kids = append(n.kids, kid)
	}
	return n, rest
}

func (n *tlv) der() []byte {
	body := n.value
	if n.tag&0x20 != 0 {
		body = nil
		for _, k := range n.kids {
			body = append(body, k.der()...)
		}
	}
	out := []byte{n.tag}
	switch l := len(body); {
	case l < 0x80:
		out = append(out, byte(l))
	case l < 0x100:
		out = append(out, 0x81, byte(l))
	default:
		out = append(out, 0x82, byte(l>>8), byte(l))
	}
	return append(out, body...)
}

// gostEnv is an envelope's fields a test changes: the key transport is an
// OCTET STRING holding DER, parsed as a tree of its own.
type gostEnv struct {
	root, ed, recipients, ktri, eci, contentParams *tlv
	kt                                             *tlv // GostR3410-KeyTransport
}

func readGOSTEnv(t *testing.T, der []byte) *gostEnv {
	t.Helper()
	e := &gostEnv{root: parseTLV(t, der)}
	e.ed = e.root.kids[1].kids[0]
	e.recipients = e.ed.kids[1]
	e.ktri = e.recipients.kids[0]
	e.kt = parseTLV(t, e.ktri.kids[3].value)
	e.eci = e.ed.kids[2]
	e.contentParams = e.eci.kids[1].kids[1]
	return e
}

func (e *gostEnv) der() []byte {
	e.ktri.kids[3].value = e.kt.der()
	return e.root.der()
}

// Paths into GostR3410-KeyTransport.
func (e *gostEnv) encKey() *tlv    { return e.kt.kids[0].kids[0] }
func (e *gostEnv) mac() *tlv       { return e.kt.kids[0].kids[1] }
func (e *gostEnv) wrapSet() *tlv   { return e.kt.kids[1].kids[0] }
func (e *gostEnv) ephemeral() *tlv { return e.kt.kids[1].kids[1] }
func (e *gostEnv) ukm() *tlv       { return e.kt.kids[1].kids[2] }

// The bad inputs of a GOST certificate login (issue 38): each is one clear
// line of the challenge class, nothing sent to AuthenticateConfirm, no PIN
// try spent, nothing left on the token; the token still logs in after.
// The envelopes are OpenSSL's (the gost engine), changed field by field,
// served by a stand-in for the service (the emulator seals only good ones).
func TestGOSTChallengeBadInput(t *testing.T) {
	g := hsmtest.NewGOST(t, 256, gosttoken.Options{})
	g512 := hsmtest.NewGOST(t, 512, gosttoken.Options{})
	other := hsmtest.NewGOST(t, 256, gosttoken.Options{})
	key, err := pkcs11.Open(context.Background(), g.Selection(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer key.Close()
	random := make([]byte, 32)
	rand.Read(random)
	fresh := func() *gostEnv { return readGOSTEnv(t, hsmtest.OpenSSLEncryptGOST(t, random, g.Cert, false)) }
	env512 := readGOSTEnv(t, hsmtest.OpenSSLEncryptGOST(t, random, g512.Cert, false))
	cases := map[string]struct {
		der  func() []byte
		want error
		line string
	}{
		"wrapped key changed": {func() []byte { e := fresh(); e.encKey().value[5] ^= 1; return e.der() }, envelope.ErrChallenge, ""},
		"MAC changed":         {func() []byte { e := fresh(); e.mac().value[0] ^= 1; return e.der() }, envelope.ErrChallenge, ""},
		"UKM of 7 bytes":      {func() []byte { e := fresh(); e.ukm().value = e.ukm().value[:7]; return e.der() }, envelope.ErrNotChallenge, "UKM (7 bytes, not 8)"},
		"unknown wrap parameter set": {func() []byte {
			e := fresh()
			e.wrapSet().value = []byte{0x2a, 0x85, 0x03, 0x02, 0x02, 0x1f, 0x09} // 1.2.643.2.2.31.9
			return e.der()
		}, envelope.ErrNotChallenge, "key wrap parameter set 1.2.643.2.2.31.9 (unknown"},
		"unknown content parameter set": {func() []byte {
			e := fresh()
			e.contentParams.kids[1].value = []byte{0x2a, 0x85, 0x03, 0x02, 0x02, 0x1f, 0x09}
			return e.der()
		}, envelope.ErrNotChallenge, "parameter set 1.2.643.2.2.31.9 is unknown"},
		"ephemeral key off the curve": {func() []byte {
			e := fresh()
			point := e.ephemeral().kids[1].value // BIT STRING: 00, then OCTET STRING 04 40 x y
			point[len(point)-1] ^= 1
			return e.der()
		}, envelope.ErrNotChallenge, "not a point of its curve"},
		"ephemeral key of the other size": {func() []byte {
			e := fresh()
			e.kt.kids[1].kids[1] = env512.ephemeral()
			return e.der()
		}, envelope.ErrNotChallenge, "ephemeral key (on TC26-512-A, not on the certificate's curve CryptoPro-A)"},
		"two recipients": {func() []byte {
			e := fresh()
			e.recipients.kids = append(e.recipients.kids, e.ktri)
			return e.der()
		}, envelope.ErrNotChallenge, "it has 2 recipients; a challenge has one"},
		"KeyAgreeRecipientInfo": {func() []byte {
			e := fresh()
			e.recipients.kids[0] = &tlv{tag: 0xa1, kids: e.ktri.kids}
			return e.der()
		}, envelope.ErrNotChallenge, "a recipient that is not key transport"},
		"not the token's certificate": {func() []byte { return hsmtest.OpenSSLEncryptGOST(t, random, other.Cert, false) }, envelope.ErrNotForUs, ""},
		"content over the bound": {func() []byte {
			return hsmtest.OpenSSLEncryptGOST(t, bytes.Repeat([]byte{7}, envelope.MaxGOSTChallenge+1), g.Cert, false)
		}, envelope.ErrNotChallenge, "the encrypted content is 257 bytes; a challenge's random is 16 to 256"},
		"mask key present": {func() []byte {
			e := fresh()
			ek := e.kt.kids[0]
			ek.kids = []*tlv{ek.kids[0], {tag: 0x80, value: make([]byte, 32)}, ek.kids[1]}
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
			if g.Tries(t) != 0 || g.GOSTObjects(t) != 0 || key.Lost() != nil {
				t.Fatalf("tries %d, session keys %d, lost %v", g.Tries(t), g.GOSTObjects(t), key.Lost())
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
	g := hsmtest.NewGOST(t, 256, gosttoken.Options{})
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
