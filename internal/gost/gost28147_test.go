package gost

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// magmaKey turns a key printed as GOST R 34.12-2015 (Magma) prints it,
// most significant first, into GOST 28147-89's byte order: the eight
// 32-bit words in the same order, each little-endian.
func magmaKey(s string) []byte {
	b := unhex(s)
	for i := 0; i < len(b); i += 4 {
		reverseBytes(b[i : i+4])
	}
	return b
}

func unhex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// Magma is GOST 28147-89 with the TC26-Z S-box: the examples of GOST R
// 34.12-2015 (RFC 8891 appendix A) and GOST R 34.13-2015 (ECB, A.2.1), as
// printed there (blocks most significant first, so reversed here).
func TestMagmaExamples(t *testing.T) {
	key := magmaKey("ffeeddccbbaa99887766554433221100f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff")
	c, err := NewCipher(key, SBoxTC26Z)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range [][2]string{
		{"fedcba9876543210", "4ee901e5c2d8ca3d"},
		{"92def06b3c130a59", "2b073f0494f372a0"},
		{"db54c704f8189d20", "de70e715d3556e48"},
		{"4a98fb2e67a8024c", "11d8d9e9eacfbc1e"},
		{"8912409b17b57e41", "7c68260996c67efb"},
	} {
		pt, ct := reversed(unhex(v[0])), reversed(unhex(v[1]))
		got := make([]byte, 8)
		c.Encrypt(got, pt)
		if !bytes.Equal(got, ct) {
			t.Errorf("E(%s) = %x, want %s", v[0], reversed(got), v[1])
		}
		c.Decrypt(got, ct)
		if !bytes.Equal(got, pt) {
			t.Errorf("D(%s) = %x, want %s", v[1], reversed(got), v[0])
		}
	}
	// Each classic mistake gives another answer: the key reversed whole,
	// another S-box, the block not reversed.
	pt, ct := reversed(unhex("fedcba9876543210")), reversed(unhex("4ee901e5c2d8ca3d"))
	for name, k := range map[string]struct {
		key []byte
		s   *SBox
		in  []byte
	}{
		"key reversed whole": {reversed(unhex("ffeeddccbbaa99887766554433221100f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff")), SBoxTC26Z, pt},
		"CryptoPro-A S-box":  {key, SBoxCryptoProA, pt},
		"block as printed":   {key, SBoxTC26Z, unhex("fedcba9876543210")},
	} {
		c, _ := NewCipher(k.key, k.s)
		got := make([]byte, 8)
		c.Encrypt(got, k.in)
		if bytes.Equal(got, ct) || bytes.Equal(reversed(got), ct) {
			t.Errorf("%s: gave the example's answer", name)
		}
	}
}

func TestSBoxes(t *testing.T) {
	for _, s := range sboxes {
		if SBoxByOID(s.OID) != s || SBoxByName(s.Name) != s {
			t.Errorf("%s: not found by its OID or name", s.Name)
		}
		for i, row := range s.k {
			var seen [16]bool
			for _, v := range row {
				seen[v] = true
			}
			for v, ok := range seen {
				if !ok {
					t.Errorf("%s: row %d is not a permutation (no %d)", s.Name, i, v)
				}
			}
		}
	}
	if SBoxByOID(OIDDigest256) != nil || SBoxByName("cryptopro-a") != nil {
		t.Error("an unknown OID or name found an S-box")
	}
	if _, err := NewCipher(make([]byte, 31), SBoxTC26Z); err == nil {
		t.Error("a 31-byte key was taken")
	}
}

// decryptCFB is CFB decryption with CryptoPro key meshing, for the tests
// only (the emulator never decrypts): the feedback is the ciphertext.
func decryptCFB(t *testing.T, key, iv, ct []byte, s *SBox, meshing bool) []byte {
	t.Helper()
	c, err := NewCipher(key, s)
	if err != nil {
		t.Fatal(err)
	}
	fb := append([]byte(nil), iv...)
	out := make([]byte, len(ct))
	gamma := make([]byte, BlockSize)
	for i := 0; i < len(ct); i += BlockSize {
		if meshing && i > 0 && i%1024 == 0 {
			c.mesh(fb)
		}
		c.Encrypt(gamma, fb)
		end := min(i+BlockSize, len(ct))
		for j := i; j < end; j++ {
			out[j] = ct[j] ^ gamma[j-i]
		}
		copy(fb, ct[i:end])
	}
	return out
}

// CFB encryption across key-meshing points, in pieces of odd sizes, is
// undone by the test's own decryption; without meshing the bytes after
// 1024 differ, before it they are the same.
func TestCFBMeshing(t *testing.T) {
	key := unhex("0001020304050607080910111213141516171819202122232425262728293031")
	iv := unhex("0102030405060708")
	pt := make([]byte, 3000)
	for i := range pt {
		pt[i] = byte(i * 7)
	}
	enc := func(meshing bool, step int) []byte {
		e, err := NewCFBEncrypter(key, iv, SBoxCryptoProA, meshing)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]byte, len(pt))
		for i := 0; i < len(pt); i += step {
			end := min(i+step, len(pt))
			e.XORKeyStream(out[i:end], pt[i:end])
		}
		return out
	}
	ct := enc(true, 3000)
	for _, step := range []int{1, 7, 8, 1023, 1025} {
		if !bytes.Equal(enc(true, step), ct) {
			t.Fatalf("pieces of %d bytes encrypt differently", step)
		}
	}
	if got := decryptCFB(t, key, iv, ct, SBoxCryptoProA, true); !bytes.Equal(got, pt) {
		t.Fatal("the ciphertext does not decrypt")
	}
	plain := enc(false, 3000)
	if !bytes.Equal(plain[:1024], ct[:1024]) || bytes.Equal(plain[1024:1032], ct[1024:1032]) {
		t.Fatal("meshing changed the first KiB or did not change the next")
	}
	// Openssl's gost engine gives the same bytes: gost28147_ext_test.go.
}

// IMIT over one block takes a zero block after it; its 4 bytes are the
// first half of the state.
func TestIMITShapes(t *testing.T) {
	key := unhex("0001020304050607080910111213141516171819202122232425262728293031")
	zero := make([]byte, 8)
	one, _ := IMIT(key, zero, []byte{1, 2, 3, 4, 5, 6, 7, 8}, SBoxCryptoProA)
	two, _ := IMIT(key, zero, []byte{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0}, SBoxCryptoProA)
	short, _ := IMIT(key, zero, []byte{1, 2, 3, 4, 5}, SBoxCryptoProA)
	padded, _ := IMIT(key, zero, []byte{1, 2, 3, 4, 5, 0, 0, 0}, SBoxCryptoProA)
	if !bytes.Equal(one, two) || !bytes.Equal(short, padded) || len(one) != 4 {
		t.Fatalf("one block %x, two %x; short %x, padded %x", one, two, short, padded)
	}
	withIV, _ := IMIT(key, unhex("0102030405060708"), make([]byte, 32), SBoxCryptoProA)
	if bytes.Equal(withIV, one) {
		t.Fatal("the IV changed nothing")
	}
	if _, err := IMIT(key, zero, nil, SBoxCryptoProA); err == nil {
		t.Fatal("an empty message was MACed")
	}
	if _, err := IMIT(key, zero, make([]byte, 1025), SBoxCryptoProA); err == nil {
		t.Fatal("more than 1 KiB was MACed without key meshing")
	}
}
