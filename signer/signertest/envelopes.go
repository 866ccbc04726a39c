package signertest

import (
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TLV is a DER element as a tree, so that a test can change one field of
// a CMS structure (an envelope a stand-in for the service sends) and
// encode it again with every length right. Single-byte tags and definite
// lengths only: DER as OpenSSL and signagent write it.
type TLV struct {
	Tag   byte
	Value []byte // a primitive's contents
	Kids  []*TLV // a constructed element's
}

// ParseTLV reads der, one whole element.
func ParseTLV(t testing.TB, der []byte) *TLV {
	t.Helper()
	n, rest := readTLV(t, der)
	if len(rest) != 0 {
		t.Fatalf("bytes after one DER element: %x", rest)
	}
	return n
}

func readTLV(t testing.TB, b []byte) (*TLV, []byte) {
	t.Helper()
	if len(b) < 2 {
		t.Fatalf("short DER: %x", b)
	}
	n := &TLV{Tag: b[0]}
	l, hdr := int(b[1]), 2
	if l >= 0x80 {
		k := l & 0x7f
		l, hdr = 0, 2+k
		for _, x := range b[2 : 2+k] {
			l = l<<8 | int(x)
		}
	}
	if len(b) < hdr+l {
		t.Fatalf("DER element longer than its bytes: %x", b)
	}
	body, rest := b[hdr:hdr+l], b[hdr+l:]
	if n.Tag&0x20 == 0 {
		n.Value = append([]byte{}, body...)
		return n, rest
	}
	for len(body) > 0 {
		var kid *TLV
		kid, body = readTLV(t, body)
		n.Kids = append(n.Kids, kid)
	}
	return n, rest
}

// DER encodes the element.
func (n *TLV) DER() []byte {
	body := n.Value
	if n.Tag&0x20 != 0 {
		body = nil
		for _, k := range n.Kids {
			body = append(body, k.DER()...)
		}
	}
	out := []byte{n.Tag}
	switch l := len(body); {
	case l < 0x80:
		out = append(out, byte(l))
	case l < 0x100:
		out = append(out, 0x81, byte(l))
	case l < 0x10000:
		out = append(out, 0x82, byte(l>>8), byte(l))
	default:
		out = append(out, 0x83, byte(l>>16), byte(l>>8), byte(l))
	}
	return append(out, body...)
}

// EnvelopeWindow is what a hostile business API sends as a certificate
// login's "challenge" to read a document sealed to the user's certificate
// (der, a CMS EnvelopedData as OpenSSL's cms -encrypt writes it, its
// content one primitive [0]): the same key transport, the content cut to
// n bytes of the ciphertext from off, and the IV the ciphertext block
// before off (the envelope's own at 0). block is the content cipher's
// block: 8 for GOST 28147-89 (CFB), 16 for AES (CBC). Opened, it is the
// document's bytes from off.
func EnvelopeWindow(t testing.TB, der []byte, block, off, n int) []byte {
	t.Helper()
	root := ParseTLV(t, der)
	ed := root.Kids[1].Kids[0]
	eci := ed.Kids[len(ed.Kids)-1]
	alg, content := eci.Kids[1], eci.Kids[2]
	if content.Tag != 0x80 {
		t.Fatalf("encryptedContent of tag %x: want a primitive [0]", content.Tag)
	}
	ct := content.Value
	if off+n > len(ct) || off < block && off != 0 {
		t.Fatalf("a window of %d bytes from %d of a %d-byte content", n, off, len(ct))
	}
	// The IV: an OCTET STRING (AES-CBC), or the first of a SEQUENCE (GOST
	// 28147-89's parameters).
	iv := alg.Kids[1]
	if iv.Tag == 0x30 {
		iv = iv.Kids[0]
	}
	if iv.Tag != 0x04 || len(iv.Value) != block {
		t.Fatalf("no %d-byte IV in the content algorithm's parameters", block)
	}
	if off > 0 {
		copy(iv.Value, ct[off-block:off])
	}
	content.Value = append([]byte{}, ct[off:off+n]...)
	return root.DER()
}

// OpenSSLEncryptRSA is `openssl cms -encrypt` of content to cert with
// AES-256-CBC and RSA key transport: a document as any sender makes one.
func OpenSSLEncryptRSA(t testing.TB, content []byte, cert *x509.Certificate) []byte {
	t.Helper()
	NeedTool(t, "openssl")
	dir := t.TempDir()
	certFile, in := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "doc")
	if err := os.WriteFile(certFile, PEM(cert), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, content, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("openssl", "cms", "-encrypt", "-binary", "-aes-256-cbc", "-outform", "DER", "-in", in, certFile).Output()
	if err != nil {
		t.Fatalf("openssl cms -encrypt: %v", err)
	}
	return out
}
