package rutoken

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/signagent/signagent/internal/gost"
)

// The APDUs below are what OpenSC 0.23's pkcs15-init sent to personalise
// this card (TestGOSTCard logs them); the rig's tests run the real thing.

func tx(t *testing.T, c *Card, apdu string) ([]byte, int) {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(apdu, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Transmit(b)
	return r[:len(r)-2], int(r[len(r)-2])<<8 | int(r[len(r)-1])
}

func want(t *testing.T, c *Card, apdu string, sw int) []byte {
	t.Helper()
	data, got := tx(t, c, apdu)
	if got != sw {
		t.Fatalf("%s: %04X, want %04X", apdu, got, sw)
	}
	return data
}

// pinData is CHANGE REFERENCE DATA's body for value.
func pinData(value string) string {
	return fmt.Sprintf("8002%04x a5%02x%x", len(value), len(value), value)
}

// personalised makes a card as pkcs15-init leaves it: the system DFs, the
// SO PIN (1) and user PIN (2, 5 tries) and a CryptoPro-A key 1 usable
// after the user PIN.
func personalised(t *testing.T, save func(*State) error) *Card {
	t.Helper()
	c := New(State{Serial: []byte{1, 2, 3, 4}}, save)
	want(t, c, "00 A4 00 00 02 3F00 00", swNotFound) // blank
	want(t, c, "80 8A 00 00", swOK)
	want(t, c, "00 E0 00 00 1F 6f1d800200008202380083023f00860f47020201000000ff00000000000000", swOK)
	want(t, c, "00 E0 00 00 1F 6f1d800200008202380083021000860f43020200000000ff00000000000000", swOK)
	want(t, c, "00 E0 00 00 1F 6f1d800200008202380083021000860f43020200000000ff00000000000000", swOK)
	for _, df := range []string{"6001", "6002"} {
		want(t, c, "00 A4 08 00 04 10001000 00", swOK)
		want(t, c, "00 E0 00 00 1F 6f1d80020000820238008302"+df+"860f43020200000000ff00000000000000", swOK)
	}
	want(t, c, "00 A4 00 00 02 3F00 00", swOK)
	want(t, c, "00 E0 00 00 27 6f258002000882021000830200018506010801aa0000860f43ff0100000000ff00000000000000", swOK)
	want(t, c, "00 24 01 01 0E "+pinData("87654321"), swOK)
	want(t, c, "00 E0 00 00 27 6f258002000882021000830200028506010401550000860f43010300000000ff00000000000000", swOK)
	want(t, c, "00 24 01 02 0E "+pinData("12345678"), swOK)
	want(t, c, "00 20 00 02 08 "+hex.EncodeToString([]byte("12345678")), swOK)
	want(t, c, "00 E0 00 00 27 6f258002002082021000830200018506032000aa0000860f460002020000000200000000000000", swOK)
	want(t, c, "00 E0 00 00 27 6f258002004082021000830200018506132000aa0000860f460002000000000200000000000000", swOK)
	want(t, c, "00 46 80 01 00", swOK)
	want(t, c, "80 40 00 00", swOK)
	return c
}

func sign(t *testing.T, c *Card, hash []byte, sw int) []byte {
	t.Helper()
	want(t, c, "00 A4 08 00 08 1000100060020001 00", swOK)
	want(t, c, "00 22 41 B6 03 840101", swOK)
	return want(t, c, "00 2A 9E 9A 20 "+hex.EncodeToString(hash)+" 40", sw)
}

// verifyCard checks a card's answer (r then s, little-endian) with
// internal/gost, after the driver's reversal (s then r, big-endian).
func verifyCard(t *testing.T, pub *gost.PublicKey, hash, answer []byte) {
	t.Helper()
	if err := gost.Verify(pub, hash, reversedBytes(answer)); err != nil {
		t.Fatalf("the card's signature: %v", err)
	}
}

func TestCardSignsOnlyAfterThePIN(t *testing.T) {
	c := personalised(t, nil)
	pub, err := c.PublicKey(1)
	if err != nil || pub.Curve.Name != "CryptoPro-A" {
		t.Fatalf("the generated key: %v %v", pub, err)
	}
	hash := make([]byte, 32)
	hash[0] = 0x42
	sign(t, c, hash, swSecurity)
	want(t, c, "00 20 00 02 08 "+hex.EncodeToString([]byte("12345678")), swOK)
	verifyCard(t, pub, hash, sign(t, c, hash, swOK))
	c.Power(false)
	sign(t, c, hash, swSecurity)
}

func TestCardPINCounter(t *testing.T) {
	c := personalised(t, nil)
	wrong := "00 20 00 02 08 " + hex.EncodeToString([]byte("00000000"))
	want(t, c, wrong, swVerifyFailed)
	want(t, c, "00 20 00 02", 0x63C4)
	for left := 3; left >= 0; left-- {
		want(t, c, wrong, swVerifyFailed)
		want(t, c, "00 20 00 02", 0x63C0|left)
	}
	want(t, c, "00 20 00 02 08 "+hex.EncodeToString([]byte("12345678")), swBlocked)
	// Only the SO PIN unblocks it.
	want(t, c, "00 2C 03 02", swSecurity)
	want(t, c, "00 20 00 01 08 "+hex.EncodeToString([]byte("87654321")), swOK)
	want(t, c, "00 2C 03 02", swOK)
	if n := c.TriesLeft(2); n != 5 {
		t.Fatalf("tries after the unblock: %d", n)
	}
	// A new PIN set by the SO, chained in two APDUs as the driver does.
	want(t, c, "10 24 01 02 04 80020004", swOK)
	want(t, c, "00 24 01 02 06 a5043433 3231", swOK)
	want(t, c, "80 40 00 00", swOK)
	want(t, c, "00 20 00 02 04 "+hex.EncodeToString([]byte("4321")), swOK)
}

func TestCardStateSurvivesARestart(t *testing.T) {
	var saved State
	c := personalised(t, func(st *State) error {
		b, err := jsonRoundTrip(st)
		saved = b
		return err
	})
	pub, _ := c.PublicKey(1)
	want(t, c, "00 20 00 02 08 "+hex.EncodeToString([]byte("00000000")), swVerifyFailed)
	again := New(saved, nil)
	if n := again.TriesLeft(2); n != 4 {
		t.Fatalf("tries after a restart: %d, want 4", n)
	}
	want(t, again, "00 20 00 02 08 "+hex.EncodeToString([]byte("12345678")), swOK)
	hash := make([]byte, 32)
	verifyCard(t, pub, hash, sign(t, again, hash, swOK))
	if s := again.Serial(); hex.EncodeToString(s) != "01020304" {
		t.Fatalf("serial after a restart: %x", s)
	}
}

func TestCardFiles(t *testing.T) {
	c := personalised(t, nil)
	want(t, c, "00 A4 08 00 04 10001000 00", swOK)
	fci := want(t, c, "00 A4 08 00 04 10001000 00", swOK)
	m, err := parseTLVs(fci[2:])
	if err != nil || len(m[0x86]) != secAttrSize || m[0x82][0] != descDF {
		t.Fatalf("a DF's FCI %x: %v", fci, err)
	}
	want(t, c, "00 A4 08 00 02 5000 00", swNotFound)
	// The file listing: the first file, the next, then 6A82.
	want(t, c, "00 A4 08 00 06 100010006002 00", swOK)
	first := want(t, c, "00 A4 00 00 00", swOK)
	if !strings.Contains(hex.EncodeToString(first), "83020001") {
		t.Fatalf("the first file of 6002: %x", first)
	}
	want(t, c, "00 A4 00 02 02 0001 00", swNotFound)
	// An EF: created, written, read back, deleted.
	want(t, c, "00 A4 00 00 02 3F00 00", swOK)
	want(t, c, "00 E0 00 00 1F 6f1d800200048202010083025032860f430000000000000200000000000000", swOK)
	want(t, c, "00 E0 00 00 1F 6f1d800200048202010083025032860f430000000000000200000000000000", swExists)
	want(t, c, "00 D6 00 00 04 01020304", swOK)
	want(t, c, "00 D6 00 02 04 01020304", swNoSpace)
	if got := want(t, c, "00 B0 00 01 00", swOK); hex.EncodeToString(got) != "020304" {
		t.Fatalf("read back: %x", got)
	}
	want(t, c, "00 B0 00 04 00", swEndOfFile)
	want(t, c, "00 A4 00 00 02 3F00 00", swOK)
	want(t, c, "00 E4 00 00 02 5032", swOK)
	want(t, c, "00 A4 08 00 02 5032 00", swNotFound)
	if got := want(t, c, "00 CA 01 81 00", swOK); hex.EncodeToString(got) != "01020304" {
		t.Fatalf("serial %x", got)
	}
	if got := want(t, c, "00 84 00 00 08", swOK); len(got) != 8 {
		t.Fatalf("GET CHALLENGE gave %d bytes", len(got))
	}
}

// jsonRoundTrip is st as the state file would give it back.
func jsonRoundTrip(st *State) (State, error) {
	var out State
	b, err := json.Marshal(st)
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	return out, err
}

func TestStateFile(t *testing.T) {
	path := t.TempDir() + "/card.state"
	st, err := LoadState(path)
	if err != nil || st.MF != nil || st.Serial != nil {
		t.Fatalf("a missing state file: %+v %v, want a blank card", st, err)
	}
	c := personalised(t, func(st *State) error { return SaveState(path, st) })
	pub, _ := c.PublicKey(1)
	st, err = LoadState(path)
	if err != nil {
		t.Fatal(err)
	}
	again := New(st, nil)
	if got, err := again.PublicKey(1); err != nil || !got.Equal(pub) {
		t.Fatalf("the key after a reload: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadState(path); err == nil {
		t.Fatal("a state file others can read was read")
	}
}
