package rutoken

import (
	"context"
	"encoding/hex"
	"io"
	"log"
	"net"
	"strings"
	"testing"
)

func TestCardSelectKeyFault(t *testing.T) {
	c := personalised(t, nil)
	c.SetSelectKeyFault(swNotFound)
	// The private key, by path and by FID from its DF: 6A82.
	want(t, c, "00 A4 08 00 08 1000100060020001 00", swNotFound)
	want(t, c, "00 A4 08 00 06 100010006002 00", swOK)
	want(t, c, "00 A4 00 00 02 0001 00", swNotFound)
	// The listing, the public key and other files are not touched.
	if first := want(t, c, "00 A4 00 00 00", swOK); len(first) == 0 {
		t.Fatal("the listing's first file: no FCI")
	}
	want(t, c, "00 A4 08 00 08 1000100060010001 00", swOK)
	want(t, c, "00 A4 08 00 04 10001000 00", swOK)
	// The PIN and the key are untouched: cleared, the card signs.
	want(t, c, "00 20 00 02 08 "+hex.EncodeToString([]byte("12345678")), swOK)
	c.SetSelectKeyFault(0)
	pub, _ := c.PublicKey(1)
	hash := make([]byte, 32)
	verifyCard(t, pub, hash, sign(t, c, hash, swOK))
	if n := c.TriesLeft(2); n != 5 {
		t.Fatalf("tries: %d", n)
	}
}

func TestServerFaultCommands(t *testing.T) {
	s := NewServer(personalised(t, nil), 1, 0, 0, 0, log.New(io.Discard, "", 0))
	for _, step := range []struct{ line, answer string }{
		{"fault", "none"},
		{"fault select-key 6A82", "ok"},
		{"fault remove-after-verify", "ok"},
		{"fault", "select-key=6A82 remove-after-verify"},
		{"fault clear", "ok"},
		{"fault", "none"},
		{"fault select-key 9000", `error: "9000" is not an error status word (61XX to 6FXX in hex)`},
		{"fault select-key 6A8", `error: "6A8" is not an error status word (61XX to 6FXX in hex)`},
		{"fault eject", `error: unknown fault "eject" (select-key SW, remove-after-verify, clear)`},
	} {
		if got := s.control(step.line); got != step.answer {
			t.Errorf("%s: %q, want %q", step.line, got, step.answer)
		}
	}
	if !IsVerifyWithPIN([]byte{0, 0x20, 0, 2, 1, '1'}) || IsVerifyWithPIN([]byte{0, 0x20, 0, 2}) {
		t.Fatal("IsVerifyWithPIN: a VERIFY with a PIN, then the empty VERIFY")
	}
}

// TestServerRemoveAfterVerify: the test plays vpcd (its side of the
// protocol: length-prefixed messages on a TCP port the card connects to).
// A wrong PIN and the empty VERIFY do not fire the fault; the right PIN is
// answered 9000, then the connection closes before the next command, and
// the card stays out until inserted.
func TestServerRemoveAfterVerify(t *testing.T) {
	vpcd, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer vpcd.Close()
	control, err := net.Listen("unix", t.TempDir()+"/ctl")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(personalised(t, nil), vpcd.Addr().(*net.TCPAddr).Port, 0, 0, 0, log.New(io.Discard, "", 0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx, control)
	conn, err := vpcd.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	apdu := func(h string) []byte {
		t.Helper()
		b, _ := hex.DecodeString(strings.ReplaceAll(h, " ", ""))
		if err := writeMsg(conn, b); err != nil {
			t.Fatal(err)
		}
		r, err := readMsg(conn)
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		return r
	}
	if got := s.control("fault remove-after-verify"); got != "ok" {
		t.Fatal(got)
	}
	if r := apdu("00 20 00 02 08 " + hex.EncodeToString([]byte("00000000"))); hex.EncodeToString(r) != "6300" {
		t.Fatalf("a wrong PIN: %x", r)
	}
	if r := apdu("00 20 00 02"); hex.EncodeToString(r) != "63c4" {
		t.Fatalf("the empty VERIFY: %x", r)
	}
	if r := apdu("00 20 00 02 08 " + hex.EncodeToString([]byte("12345678"))); hex.EncodeToString(r) != "9000" {
		t.Fatalf("the right PIN: %x", r)
	}
	writeMsg(conn, []byte{0x00, 0xA4, 0x08, 0x00, 0x08, 0x10, 0x00, 0x10, 0x00, 0x60, 0x02, 0x00, 0x01, 0x00})
	if r, err := readMsg(conn); err == nil {
		t.Fatalf("the key's SELECT after the VERIFY was answered %x: the card was not removed", r)
	}
	if got := s.control("status"); !strings.HasPrefix(got, "removed waiting") {
		t.Fatalf("status after the fault: %q", got)
	}
	if got := s.control("fault"); got != "none" {
		t.Fatalf("the fault fired but stays set: %q", got)
	}
}
