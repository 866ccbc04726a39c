package gost

import (
	"crypto/cipher"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// GOST 28147-89 (RFC 5830), the block cipher of CryptoPro's key transport
// (RFC 4490): what the emulator needs to encrypt a certificate-login
// challenge as the service does. Byte order is the implementations' (the
// gost engine's, libgcrypt's, PKCS#11 tokens'): the key is eight 32-bit
// words K0..K7 read little-endian, a block is N1 then N2, each
// little-endian.

// SBox is a GOST 28147-89 parameter set's substitution: eight 4-bit
// S-boxes, k[0] for the least significant nibble of a round's input.
type SBox struct {
	Name string
	OID  asn1.ObjectIdentifier
	k    [8][16]byte
}

// The S-boxes the key transport meets: CryptoPro-A..D (RFC 4357 section
// 11.2) and TC26's Z, the S-box of Magma (RFC 7836, RFC 8891 section 4.1:
// Pi'_0..Pi'_7).
var (
	SBoxCryptoProA = newSBox("CryptoPro-A", OIDGost28147CryptoProA, "96328B17A4EFC0D5 37E98AF0526CB4D1 E462B3D8CF5A0719 E7ACD13902B4F856 B5198DF0E423C7A6 3ADC120B75948FE6 1D297A608C45F3BE BAF50CE8623917D4")
	SBoxCryptoProB = newSBox("CryptoPro-B", OIDGost28147CryptoProB, "84B135092EACD67F 012A4D5C973FB86E EC0A92DB758F3614 750DB6123ACF4E98 27CF95AB140D68E3 83264DEBC17FA095 52AB91C374D06F8E 04BE8371A296FD5C")
	SBoxCryptoProC = newSBox("CryptoPro-C", OIDGost28147CryptoProC, "1BC29D0F458EA763 017DB4528EFC9A63 825049FA37CD6E1B 36015DA8B297EFC4 8DB0451293CE6FA7 C9B18E247365A0FD A968DE20F35B41C7 7405A2FEC61BD938")
	SBoxCryptoProD = newSBox("CryptoPro-D", OIDGost28147CryptoProD, "FC2A645079ED1B83 B634CFE27D805A91 1CB0FE65AD489372 15ECA70D62B493F8 0C89D2AB73654EF1 80F325EB1A47C9D6 306F1E92D8C4BA57 1A68FB04C3597D2E")
	SBoxTC26Z      = newSBox("TC26-Z", OIDGost28147TC26Z, "C462A5B9E8D703F1 68239A5C1E47BD0F B3582FADE174C960 C821D4F670A53E9B 7F5A816D093EB42C 5DF692CAB78143E0 8E25691CF4B0DA37 17ED05834FA69CB2")
	sboxes         = []*SBox{SBoxCryptoProA, SBoxCryptoProB, SBoxCryptoProC, SBoxCryptoProD, SBoxTC26Z}
)

// SBoxByOID returns the S-box of a parameter-set OID, or nil.
func SBoxByOID(oid asn1.ObjectIdentifier) *SBox {
	for _, s := range sboxes {
		if s.OID.Equal(oid) {
			return s
		}
	}
	return nil
}

// SBoxByName returns the S-box named name ("CryptoPro-A", "TC26-Z", ...),
// or nil.
func SBoxByName(name string) *SBox {
	for _, s := range sboxes {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// newSBox reads an S-box written as its eight rows k[0]..k[7], each the
// sixteen nibbles of one 4-bit S-box in hex, as the RFCs print them.
func newSBox(name string, oid asn1.ObjectIdentifier, rows string) *SBox {
	s := &SBox{Name: name, OID: oid}
	f := strings.Fields(rows)
	if len(f) != len(s.k) {
		panic("gost: S-box " + name + " is not eight rows")
	}
	for i, row := range f {
		if len(row) != len(s.k[i]) {
			panic("gost: S-box " + name + " has a row that is not sixteen nibbles")
		}
		for j := range row {
			v, err := strconv.ParseUint(row[j:j+1], 16, 4)
			if err != nil {
				panic("gost: S-box " + name + ": " + err.Error())
			}
			s.k[i][j] = byte(v)
		}
	}
	return s
}

// BlockSize is GOST 28147-89's block size in bytes; KeySize its key size.
const (
	BlockSize = 8
	KeySize   = 32
)

// Cipher is GOST 28147-89 with one key and S-box; it is a cipher.Block.
type Cipher struct {
	k [8]uint32
	t [4][256]uint32 // the S-box, two nibbles a table, placed in the word
}

var _ cipher.Block = (*Cipher)(nil)

// NewCipher keys GOST 28147-89 with a 32-byte key and the S-box s.
func NewCipher(key []byte, s *SBox) (*Cipher, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("a GOST 28147-89 key is %d bytes, not %d", KeySize, len(key))
	}
	if s == nil {
		return nil, errors.New("GOST 28147-89 needs an S-box")
	}
	c := &Cipher{}
	for i := range c.k {
		c.k[i] = binary.LittleEndian.Uint32(key[4*i:])
	}
	for i := range 256 {
		for j := range 4 {
			lo, hi := s.k[2*j][i&15], s.k[2*j+1][i>>4]
			c.t[j][i] = uint32(hi<<4|lo) << (8 * j)
		}
	}
	return c, nil
}

// BlockSize is 8.
func (c *Cipher) BlockSize() int { return BlockSize }

// f is the round function: S-boxes, then a rotation left by 11.
func (c *Cipher) f(x uint32) uint32 {
	x = c.t[0][x&255] | c.t[1][x>>8&255] | c.t[2][x>>16&255] | c.t[3][x>>24]
	return bits.RotateLeft32(x, 11)
}

// Encrypt encrypts one block: 32 rounds, the key's words in the order
// K0..K7 three times, then K7..K0.
func (c *Cipher) Encrypt(dst, src []byte) {
	n1, n2 := binary.LittleEndian.Uint32(src), binary.LittleEndian.Uint32(src[4:])
	for r := range 24 {
		n1, n2 = n2^c.f(n1+c.k[r%8]), n1
	}
	for r := 7; r >= 0; r-- {
		n1, n2 = n2^c.f(n1+c.k[r]), n1
	}
	// The last round does not swap: undo this loop's swap.
	binary.LittleEndian.PutUint32(dst, n2)
	binary.LittleEndian.PutUint32(dst[4:], n1)
}

// Decrypt decrypts one block (K0..K7 once, then K7..K0 three times). The
// emulator never decrypts a message; CryptoPro key meshing needs it.
func (c *Cipher) Decrypt(dst, src []byte) {
	n1, n2 := binary.LittleEndian.Uint32(src), binary.LittleEndian.Uint32(src[4:])
	for r := range 8 {
		n1, n2 = n2^c.f(n1+c.k[r]), n1
	}
	for r := range 24 {
		n1, n2 = n2^c.f(n1+c.k[7-r%8]), n1
	}
	binary.LittleEndian.PutUint32(dst, n2)
	binary.LittleEndian.PutUint32(dst[4:], n1)
}

// EncryptECB encrypts whole blocks in ECB mode (the key wrap's 32-byte key).
func (c *Cipher) EncryptECB(dst, src []byte) error {
	if len(src)%BlockSize != 0 || len(dst) < len(src) {
		return fmt.Errorf("GOST 28147-89 ECB takes whole %d-byte blocks, not %d bytes", BlockSize, len(src))
	}
	for i := 0; i < len(src); i += BlockSize {
		c.Encrypt(dst[i:], src[i:])
	}
	return nil
}

// meshingKey is the constant C of CryptoPro key meshing (RFC 4357 section
// 2.3.2).
var meshingKey = []byte{
	0x69, 0x00, 0x72, 0x22, 0x64, 0xC9, 0x04, 0x23, 0x8D, 0x3A, 0xDB, 0x96, 0x46, 0xE9, 0x2A, 0xC4,
	0x18, 0xFE, 0xAC, 0x94, 0x00, 0xED, 0x07, 0x12, 0xC0, 0x86, 0xDC, 0xC2, 0xEF, 0x4C, 0xA9, 0x2B,
}

// mesh is CryptoPro key meshing (RFC 4357 section 2.3.2): the new key is
// C decrypted in ECB under the old one, and the feedback is encrypted
// under the new key.
func (c *Cipher) mesh(iv []byte) {
	var k [KeySize]byte
	for i := 0; i < KeySize; i += BlockSize {
		c.Decrypt(k[i:], meshingKey[i:])
	}
	for i := range c.k {
		c.k[i] = binary.LittleEndian.Uint32(k[4*i:])
	}
	c.Encrypt(iv, iv)
}

// cfbEncrypter is GOST 28147-89 in CFB mode (gamma with feedback), with
// CryptoPro key meshing after every 1024 bytes when meshing is set.
type cfbEncrypter struct {
	c       *Cipher
	iv      [BlockSize]byte // the feedback: the last ciphertext block
	gamma   [BlockSize]byte
	used    int // bytes of gamma consumed
	blocks  int // gammas made since the last meshing
	meshing bool
}

// NewCFBEncrypter returns a stream that encrypts in CFB mode under key
// with S-box s and the 8-byte iv; with meshing, CryptoPro key meshing
// renews the key every 1024 bytes (RFC 4357 section 2.3.2), as the
// CryptoPro parameter sets and TC26-Z ask. It encrypts only: CFB
// decryption feeds back the input, not the output.
func NewCFBEncrypter(key, iv []byte, s *SBox, meshing bool) (cipher.Stream, error) {
	c, err := NewCipher(key, s)
	if err != nil {
		return nil, err
	}
	if len(iv) != BlockSize {
		return nil, fmt.Errorf("a GOST 28147-89 IV is %d bytes, not %d", BlockSize, len(iv))
	}
	e := &cfbEncrypter{c: c, used: BlockSize, meshing: meshing}
	copy(e.iv[:], iv)
	return e, nil
}

const meshBlocks = 1024 / BlockSize

func (e *cfbEncrypter) XORKeyStream(dst, src []byte) {
	if len(dst) < len(src) {
		panic("gost: output smaller than input")
	}
	for i := range src {
		if e.used == BlockSize {
			if e.meshing && e.blocks == meshBlocks {
				e.c.mesh(e.iv[:])
				e.blocks = 0
			}
			e.c.Encrypt(e.gamma[:], e.iv[:])
			e.blocks++
			e.used = 0
		}
		dst[i] = src[i] ^ e.gamma[e.used]
		e.iv[e.used] = dst[i]
		e.used++
	}
}

// IMIT is GOST 28147-89's MAC (RFC 5830 section 8) over data with the
// 8-byte iv (zeros for the plain MAC; the UKM in the key wrap): its first
// four bytes, as the key wrap and the gost engine take them. A short last
// block is padded with zeros; a single block gets a zero block after it
// (the standard asks for two at least). No key meshing: the key wrap MACs
// 32 bytes, and IMIT refuses more than 1024.
func IMIT(key, iv, data []byte, s *SBox) ([]byte, error) {
	c, err := NewCipher(key, s)
	if err != nil {
		return nil, err
	}
	if len(iv) != BlockSize {
		return nil, fmt.Errorf("a GOST 28147-89 IMIT IV is %d bytes, not %d", BlockSize, len(iv))
	}
	if len(data) == 0 || len(data) > 1024 {
		return nil, fmt.Errorf("IMIT here MACs 1 to 1024 bytes (no key meshing), not %d", len(data))
	}
	n1, n2 := binary.LittleEndian.Uint32(iv), binary.LittleEndian.Uint32(iv[4:])
	block := func(b []byte) {
		var p [BlockSize]byte
		copy(p[:], b)
		n1 ^= binary.LittleEndian.Uint32(p[:])
		n2 ^= binary.LittleEndian.Uint32(p[4:])
		for r := range 16 {
			n1, n2 = n2^c.f(n1+c.k[r%8]), n1
		}
	}
	for i := 0; i < len(data); i += BlockSize {
		block(data[i:min(i+BlockSize, len(data))])
	}
	if len(data) <= BlockSize {
		block(nil)
	}
	out := make([]byte, 4)
	binary.LittleEndian.PutUint32(out, n1)
	return out, nil
}
