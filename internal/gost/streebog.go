// Package gost verifies GOST R 34.10-2012 signatures and computes the GOST
// R 34.11-2012 hash (Streebog), written from the standards (RFC 6986, RFC
// 7091) so that signagent and its emulator can check a GOST CMS signature
// without a GPL library. It verifies only: signing stays on the token
// (PKCS#11), never here.
package gost

import (
	"encoding/binary"
	"encoding/hex"
	"hash"
	"math/bits"
)

// New256 returns a Streebog-256 hash; New512 a Streebog-512 hash. Their
// output is in the byte order implementations (GnuTLS, OpenSSL's gost
// engine, PKCS#11 tokens) give, the reverse of the standard's printed
// notation.
func New256() hash.Hash { return newStreebog(32) }

// New512 returns a Streebog-512 hash.
func New512() hash.Hash { return newStreebog(64) }

// Sum256 is Streebog-256 of data; Sum512 of data with Streebog-512.
func Sum256(data []byte) []byte { h := New256(); h.Write(data); return h.Sum(nil) }

// Sum512 is Streebog-512 of data.
func Sum512(data []byte) []byte { h := New512(); h.Write(data); return h.Sum(nil) }

type block [8]uint64 // 512 bits, least significant word first

type streebog struct {
	size     int
	h, n, s  block // the chaining value, the bits processed, the sum of blocks
	buf      [64]byte
	buffered int
}

func newStreebog(size int) *streebog {
	d := &streebog{size: size}
	d.Reset()
	return d
}

func (d *streebog) Size() int      { return d.size }
func (d *streebog) BlockSize() int { return 64 }

func (d *streebog) Reset() {
	iv := uint64(0)
	if d.size == 32 {
		iv = 0x0101010101010101
	}
	for i := range d.h {
		d.h[i], d.n[i], d.s[i] = iv, 0, 0
	}
	d.buffered = 0
}

// Write processes every complete 64-byte block at once: the standard
// compresses a block as soon as 512 bits are there, even a last one.
func (d *streebog) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		c := copy(d.buf[d.buffered:], p)
		d.buffered += c
		p = p[c:]
		if d.buffered == 64 {
			m := load(d.buf[:])
			d.h = g(&d.n, &d.h, &m)
			add(&d.n, &block{512})
			add(&d.s, &m)
			d.buffered = 0
		}
	}
	return n, nil
}

func (d *streebog) Sum(in []byte) []byte {
	c := *d // Sum does not change the state
	var pad [64]byte
	copy(pad[:], c.buf[:c.buffered])
	pad[c.buffered] = 1
	m := load(pad[:])
	c.h = g(&c.n, &c.h, &m)
	add(&c.n, &block{uint64(c.buffered) * 8})
	add(&c.s, &m)
	var zero block
	c.h = g(&zero, &c.h, &c.n)
	c.h = g(&zero, &c.h, &c.s)
	var out [64]byte
	for i, w := range c.h {
		binary.LittleEndian.PutUint64(out[8*i:], w)
	}
	return append(in, out[64-c.size:]...)
}

func load(b []byte) block {
	var m block
	for i := range m {
		m[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return m
}

// add sets a to a + b modulo 2^512.
func add(a, b *block) {
	var carry uint64
	for i := range a {
		a[i], carry = bits.Add64(a[i], b[i], carry)
	}
}

func xor(a, b *block) block {
	var r block
	for i := range r {
		r[i] = a[i] ^ b[i]
	}
	return r
}

// lps is the composition of the substitution Pi, the transposition tau and
// the linear map l, through the table built in init.
func lps(x block) block {
	var r block
	for w := range r {
		sh := uint(8 * w)
		r[w] = lpsTable[0][byte(x[0]>>sh)] ^ lpsTable[1][byte(x[1]>>sh)] ^ lpsTable[2][byte(x[2]>>sh)] ^
			lpsTable[3][byte(x[3]>>sh)] ^ lpsTable[4][byte(x[4]>>sh)] ^ lpsTable[5][byte(x[5]>>sh)] ^
			lpsTable[6][byte(x[6]>>sh)] ^ lpsTable[7][byte(x[7]>>sh)]
	}
	return r
}

// g is the compression function g_N(h, m) = E(LPS(h xor N), m) xor h xor m.
func g(n, h, m *block) block {
	k := lps(xor(h, n))
	st := xor(&k, m)
	for i := 0; i < 12; i++ {
		st = lps(st)
		k = lps(xor(&k, &iterC[i]))
		st = xor(&st, &k)
	}
	st = xor(&st, h)
	return xor(&st, m)
}

var (
	lpsTable [8][256]uint64
	iterC    [12]block
)

func init() {
	// After Pi and tau, byte c of output word w is Pi of byte w of input
	// word c; l maps bit k of byte c of a word to the row A[63-8c-k].
	for c := 0; c < 8; c++ {
		for v := 0; v < 256; v++ {
			var t uint64
			p := sboxPi[v]
			for k := 0; k < 8; k++ {
				if p&(1<<k) != 0 {
					t ^= matrixA[63-8*c-k]
				}
			}
			lpsTable[c][v] = t
		}
	}
	// The standard prints the iteration constants most significant byte
	// first: the last 16 hex digits are word 0.
	for i, s := range constC {
		b, err := hex.DecodeString(s)
		if err != nil || len(b) != 64 {
			panic("gost: bad iteration constant")
		}
		for w := 0; w < 8; w++ {
			iterC[i][w] = binary.BigEndian.Uint64(b[64-8*(w+1):])
		}
	}
}
