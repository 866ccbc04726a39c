package gost

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/big"
)

// Sign makes a GOST R 34.10-2012 signature with the private scalar d on c
// over digest (the hash's output bytes as the hash gives them, read
// little-endian as Verify reads them), in the PKCS#11 and CMS form: s then
// r, each big-endian, each c.Bits/8 bytes. r supplies the nonces
// (crypto/rand when nil).
//
// For test cards and the emulator only: the multiplication is scalarMult,
// which is not constant time (see VKO256). signagent itself never signs in
// Go: its keys stay on their tokens.
func Sign(c *Curve, d *big.Int, digest []byte, r io.Reader) ([]byte, error) {
	if r == nil {
		r = rand.Reader
	}
	n := c.Bits / 8
	if len(digest) != n {
		return nil, fmt.Errorf("a %d-bit GOST key signs a %d-byte hash, not %d bytes", c.Bits, n, len(digest))
	}
	if d.Sign() <= 0 || d.Cmp(c.Q) >= 0 {
		return nil, errors.New("the GOST private scalar is out of range")
	}
	e := new(big.Int).SetBytes(reversed(digest))
	e.Mod(e, c.Q)
	if e.Sign() == 0 {
		e.SetInt64(1)
	}
	for {
		k, kG, err := GenerateEphemeral(c, r)
		if err != nil {
			return nil, err
		}
		rr := new(big.Int).Mod(kG.X, c.Q)
		if rr.Sign() == 0 {
			continue
		}
		s := new(big.Int).Mul(rr, d)
		s.Add(s, new(big.Int).Mul(k, e)).Mod(s, c.Q)
		if s.Sign() == 0 {
			continue
		}
		out := make([]byte, 2*n)
		s.FillBytes(out[:n])
		rr.FillBytes(out[n:])
		return out, nil
	}
}
