package gost

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/big"
)

// VKO256 is VKO_GOSTR3410_2012_256 (RFC 7836 section 4.3.1): the key
// agreement of the private scalar d (on pub's curve) with the peer's
// public key pub and the UKM, read little-endian (a UKM of zero counts as
// one): Streebog-256 of (UKM*d mod q)*pub, x then y, each little-endian.
// CryptoPro key transport takes Streebog-256 for 512-bit keys too.
//
// The multiplication is internal/gost's scalarMult, which is not constant
// time: fine for the emulator's ephemeral keys, made for one challenge and
// thrown away, and for no long-lived secret. signagent's agent never
// multiplies a secret in Go (its token does).
func VKO256(d *big.Int, pub *PublicKey, ukm []byte) ([]byte, error) {
	c := pub.Curve
	if len(ukm) == 0 {
		return nil, errors.New("VKO needs a UKM")
	}
	if d.Sign() <= 0 || d.Cmp(c.Q) >= 0 {
		return nil, errors.New("the VKO private scalar is out of range")
	}
	if !c.onCurve(pub.X, pub.Y) {
		return nil, errors.New("the VKO peer key is not a point of its curve")
	}
	u := new(big.Int).SetBytes(reversed(ukm))
	if u.Sign() == 0 {
		u.SetInt64(1)
	}
	u.Mul(u, d).Mod(u, c.Q)
	x, y := c.scalarMult(pub.X, pub.Y, u)
	if x == nil {
		return nil, errors.New("the VKO point is the point at infinity")
	}
	return Sum256((&PublicKey{Curve: c, X: x, Y: y}).Bytes()), nil
}

// GenerateEphemeral makes a key pair on c from r (crypto/rand when nil):
// a scalar d in [1, q-1] and its public key d*G. For the emulator's
// throwaway keys: see VKO256 on constant time.
func GenerateEphemeral(c *Curve, r io.Reader) (*big.Int, *PublicKey, error) {
	if r == nil {
		r = rand.Reader
	}
	d, err := rand.Int(r, new(big.Int).Sub(c.Q, big.NewInt(1)))
	if err != nil {
		return nil, nil, fmt.Errorf("could not make an ephemeral GOST key: %w", err)
	}
	d.Add(d, big.NewInt(1))
	x, y := c.scalarMult(c.X, c.Y, d)
	return d, &PublicKey{Curve: c, X: x, Y: y}, nil
}
