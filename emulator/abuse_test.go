package emulator

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/pkcs11/softhsm"
	"github.com/signagent/signagent/signer"
)

// stepOne is an emulator with one partner whose key is in memory (the
// emulator never sees the key; the test is the partner), and a function
// that signs step-1 requests at a given time.
func stepOne(t *testing.T, cfg Config) (*Server, func(time.Time) []byte, func([]byte, time.Time) int) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cert, err := softhsm.SelfSigned(key, "partner", time.Now().Add(-time.Hour), time.Now().Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Partners = []Partner{{Name: "p", APIKey: "abc-123", Certificates: []string{string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))}}}
	cfg.Users = []User{{ID: "u1", Phone: "9161234567", Linked: []string{"p:crm-1", "p:crm-2"}}}
	s, err := New(&cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	cms := &signer.CMS{Key: key, Cert: cert}
	cred := canonical.Credential{Kind: canonical.Phone, Value: "9161234567"}
	sign := func(ts time.Time) []byte {
		der, err := cms.SignText(context.Background(), canonical.Text("abc-123", cred, ts), ts)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	send := func(der []byte, ts time.Time) int {
		q := url.Values{"apiKey": {"abc-123"}, "phone": {"9161234567"}, "timestamp": {canonical.FormatTimestamp(ts)}, "serviceUserId": {"crm-1"}}
		resp, err := http.Post(s.URL()+apiPath+"authenticate-by-truster?"+q.Encode(), "application/octet-stream", strings.NewReader(string(der)))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	return s, sign, send
}

func TestSignedRequestIsGoodOnce(t *testing.T) {
	t.Parallel()
	s, sign, send := stepOne(t, Config{})
	ts := canonical.Now()
	der := sign(ts)
	if st := send(der, ts); st != 200 {
		t.Fatalf("first use: %d", st)
	}
	// Sent again while its Key is pending (a retry whose answer was lost):
	// the same Key, no new one.
	for i := range 3 {
		if st := send(der, ts); st != 200 {
			t.Fatalf("repeat %d while pending: %d", i, st)
		}
	}
	if got := s.Stats().ChallengesByUser["crm-1"]; got != 1 {
		t.Fatalf("%d Keys issued for one signed request, want 1", got)
	}
	// The Key, from the answer to the request sent once more.
	q := url.Values{"apiKey": {"abc-123"}, "phone": {"9161234567"}, "timestamp": {canonical.FormatTimestamp(ts)}, "serviceUserId": {"crm-1"}}
	resp, err := http.Post(s.URL()+apiPath+"authenticate-by-truster?"+q.Encode(), "application/octet-stream", strings.NewReader(string(der)))
	if err != nil {
		t.Fatal(err)
	}
	var ans struct{ Key string }
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || ans.Key == "" {
		t.Fatalf("the Key: %v %+v", err, ans)
	}
	resp.Body.Close()
	key := ans.Key
	q = url.Values{"apiKey": {"abc-123"}, "id": {"9161234567"}, "key": {key}}
	resp, err = http.Post(s.URL()+apiPath+"approve-truster?"+q.Encode(), "", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("approve: %v %v", resp, err)
	}
	resp.Body.Close()
	// Once the Key is spent, the signed request is refused.
	for i := range 3 {
		if st := send(der, ts); st != 400 {
			t.Fatalf("replay %d after approval: %d, want 400", i, st)
		}
	}
	if got := s.Stats().Rejections[CodeSignatureReused]; got != 3 {
		t.Fatalf("%d replays refused as %s, want 3", got, CodeSignatureReused)
	}
	if got := s.Stats().Sessions; got != 1 {
		t.Fatalf("%d sessions from one signed request", got)
	}
}

// TestSignatureForAnotherServiceUserID: the signed text does not hold the
// serviceUserId, so one signature sent for another serviceUserId is the
// same text used twice: refused, even while its Key is pending.
func TestSignatureForAnotherServiceUserID(t *testing.T) {
	t.Parallel()
	s, sign, send := stepOne(t, Config{})
	ts := canonical.Now()
	der := sign(ts)
	if st := send(der, ts); st != 200 {
		t.Fatalf("first use: %d", st)
	}
	q := url.Values{"apiKey": {"abc-123"}, "phone": {"9161234567"}, "timestamp": {canonical.FormatTimestamp(ts)}, "serviceUserId": {"crm-2"}}
	resp, err := http.Post(s.URL()+apiPath+"authenticate-by-truster?"+q.Encode(), "application/octet-stream", strings.NewReader(string(der)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 || s.Stats().Rejections[CodeSignatureReused] != 1 {
		t.Fatalf("the signature for crm-2: %d, %v", resp.StatusCode, s.Stats().Rejections)
	}
	if st := send(sign(ts.Add(time.Second)), ts.Add(time.Second)); st != 200 {
		t.Fatalf("the next second's text: %d", st)
	}
}

func TestUnusedKeysAndSpentSignaturesAreForgotten(t *testing.T) {
	t.Parallel()
	s, sign, send := stepOne(t, Config{KeyTTL: Duration(time.Minute), TimestampSkew: Duration(time.Minute)})
	start := canonical.Now()
	now := start
	s.SetClock(func() time.Time { return now })
	for i := range 50 {
		ts := start.Add(time.Duration(i) * time.Second)
		now = ts
		if st := send(sign(ts), ts); st != 200 {
			t.Fatalf("request %d: %d", i, st)
		}
	}
	if st := s.Stats(); st.PendingKeys != 50 || st.SpentSignatures != 50 {
		t.Fatalf("before expiry: %d keys, %d signatures held", st.PendingKeys, st.SpentSignatures)
	}
	// Long after: every Key has expired and every timestamp is out of the
	// window; one more request sweeps them.
	now = start.Add(time.Hour)
	if st := send(sign(now), now); st != 200 {
		t.Fatalf("request after an hour: %d", st)
	}
	if st := s.Stats(); st.PendingKeys != 1 || st.SpentSignatures != 1 {
		t.Fatalf("after expiry: %d keys, %d signatures still held, want 1 and 1", st.PendingKeys, st.SpentSignatures)
	}
}

func TestSlowRequestBodyIsCutOff(t *testing.T) {
	t.Parallel()
	s, _, _ := stepOne(t, Config{ReadTimeout: Duration(300 * time.Millisecond)})
	addr := strings.TrimPrefix(s.URL(), "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Headers promise a body that never comes.
	fmt.Fprintf(c, "POST %sauthenticate-by-truster?apiKey=abc-123 HTTP/1.1\r\nHost: e\r\nContent-Length: 1000\r\n\r\nabc", apiPath)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	io.Copy(io.Discard, c) // returns when the server closes the connection
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the connection stayed open %v with a stalled body", took)
	}
}
