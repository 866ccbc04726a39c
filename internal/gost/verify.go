package gost

import (
	"bytes"
	"crypto"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
)

// Curve is a GOST R 34.10-2012 parameter set in short Weierstrass form,
// y^2 = x^3 + ax + b over GF(p), with the base point (X, Y) of prime order Q.
type Curve struct {
	Name       string
	OID        asn1.ObjectIdentifier
	Bits       int // 256 or 512: the key's and the hash's size
	P, A, B, Q *big.Int
	X, Y       *big.Int
}

// as is c again under another name and OID (the parameters are shared:
// nothing changes a curve's once it is made).
func (c *Curve) as(name string, oid asn1.ObjectIdentifier) *Curve {
	a := *c
	a.Name, a.OID = name, oid
	return &a
}

func hexInt(s string) *big.Int {
	v, ok := new(big.Int).SetString(s, 16)
	if !ok {
		panic("gost: bad constant " + s)
	}
	return v
}

// The parameter sets (RFC 4357 10.1, RFC 7836 appendix A). TC26-256-B..D
// and CryptoPro-XchA, -XchB reuse the CryptoPro curves under other names.
var (
	cpA = &Curve{Name: "CryptoPro-A", OID: asn1.ObjectIdentifier{1, 2, 643, 2, 2, 35, 1}, Bits: 256,
		P: hexInt("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFD97"),
		A: hexInt("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFD94"),
		B: big.NewInt(0xA6),
		Q: hexInt("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF6C611070995AD10045841B09B761B893"),
		X: big.NewInt(1),
		Y: hexInt("8D91E471E0989CDA27DF505A453F2B7635294F2DDF23E3B122ACC99C9E9F1E14")}
	cpB = &Curve{Name: "CryptoPro-B", OID: asn1.ObjectIdentifier{1, 2, 643, 2, 2, 35, 2}, Bits: 256,
		P: hexInt("8000000000000000000000000000000000000000000000000000000000000C99"),
		A: hexInt("8000000000000000000000000000000000000000000000000000000000000C96"),
		B: hexInt("3E1AF419A269A5F866A7D3C25C3DF80AE979259373FF2B182F49D4CE7E1BBC8B"),
		Q: hexInt("800000000000000000000000000000015F700CFFF1A624E5E497161BCC8A198F"),
		X: big.NewInt(1),
		Y: hexInt("3FA8124359F96680B83D1C3EB2C070E5C545C9858D03ECFB744BF8D717717EFC")}
	cpC = &Curve{Name: "CryptoPro-C", OID: asn1.ObjectIdentifier{1, 2, 643, 2, 2, 35, 3}, Bits: 256,
		P: hexInt("9B9F605F5A858107AB1EC85E6B41C8AACF846E86789051D37998F7B9022D759B"),
		A: hexInt("9B9F605F5A858107AB1EC85E6B41C8AACF846E86789051D37998F7B9022D7598"),
		B: big.NewInt(0x805A),
		Q: hexInt("9B9F605F5A858107AB1EC85E6B41C8AA582CA3511EDDFB74F02F3A6598980BB9"),
		X: big.NewInt(0),
		Y: hexInt("41ECE55743711A8C3CBF3783CD08C0EE4D4DC440D4641A8F366E550DFDB3BB67")}
	curves = []*Curve{
		cpA, cpB, cpC,
		cpA.as("CryptoPro-XchA", asn1.ObjectIdentifier{1, 2, 643, 2, 2, 36, 0}),
		cpC.as("CryptoPro-XchB", asn1.ObjectIdentifier{1, 2, 643, 2, 2, 36, 1}),
		cpA.as("TC26-256-B", asn1.ObjectIdentifier{1, 2, 643, 7, 1, 2, 1, 1, 2}),
		cpB.as("TC26-256-C", asn1.ObjectIdentifier{1, 2, 643, 7, 1, 2, 1, 1, 3}),
		cpC.as("TC26-256-D", asn1.ObjectIdentifier{1, 2, 643, 7, 1, 2, 1, 1, 4}),
		{Name: "TC26-512-A", OID: asn1.ObjectIdentifier{1, 2, 643, 7, 1, 2, 1, 2, 1}, Bits: 512,
			P: hexInt("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFDC7"),
			A: hexInt("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFDC4"),
			B: hexInt("E8C2505DEDFC86DDC1BD0B2B6667F1DA34B82574761CB0E879BD081CFD0B6265EE3CB090F30D27614CB4574010DA90DD862EF9D4EBEE4761503190785A71C760"),
			Q: hexInt("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF27E69532F48D89116FF22B8D4E0560609B4B38ABFAD2B85DCACDB1411F10B275"),
			X: big.NewInt(3),
			Y: hexInt("7503CFE87A836AE3A61B8816E25450E6CE5E1C93ACF1ABC1778064FDCBEFA921DF1626BE4FD036E93D75E6A50E3A41E98028FE5FC235F5B889A589CB5215F2A4")},
		{Name: "TC26-512-B", OID: asn1.ObjectIdentifier{1, 2, 643, 7, 1, 2, 1, 2, 2}, Bits: 512,
			P: hexInt("8000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000006F"),
			A: hexInt("8000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000006C"),
			B: hexInt("687D1B459DC841457E3E06CF6F5E2517B97C7D614AF138BCBF85DC806C4B289F3E965D2DB1416D217F8B276FAD1AB69C50F78BEE1FA3106EFB8CCBC7C5140116"),
			Q: hexInt("800000000000000000000000000000000000000000000000000000000000000149A1EC142565A545ACFDB77BD9D40CFA8B996712101BEA0EC6346C54374F25BD"),
			X: big.NewInt(2),
			Y: hexInt("1A8F7EDA389B094C2C071E3647A8940F3C123B697578C213BE6DD9E6C8EC7335DCB228FD1EDF4A39152CBCAAF8C0398828041055F94CEEEC7E21340780FE41BD")},
	}
	// testCurve is id-GostR3410-2001-TestParamSet, the curve of the
	// standard's worked example (GOST R 34.10-2012 A.1, RFC 7091).
	testCurve = &Curve{Name: "TestParamSet", OID: asn1.ObjectIdentifier{1, 2, 643, 2, 2, 35, 0}, Bits: 256,
		P: hexInt("8000000000000000000000000000000000000000000000000000000000000431"),
		A: big.NewInt(7),
		B: hexInt("5FBFF498AA938CE739B8E022FBAFEF40563F6E6A3472FC2A514C0CE9DAE23B7E"),
		Q: hexInt("8000000000000000000000000000000150FE8A1892976154C59CFC193ACCF5B3"),
		X: big.NewInt(2),
		Y: hexInt("08E2A8A0E65147D4BD6316030E16D19C85C97F0A9CA267122B96ABBCEA7E8FC8")}
)

// Curves returns the parameter sets this package verifies on.
func Curves() []*Curve { return append([]*Curve(nil), curves...) }

// CurveByOID returns the parameter set with oid, or nil.
func CurveByOID(oid asn1.ObjectIdentifier) *Curve {
	for _, c := range curves {
		if c.OID.Equal(oid) {
			return c
		}
	}
	return nil
}

// PublicKey is a GOST R 34.10-2012 public key.
type PublicKey struct {
	Curve *Curve
	X, Y  *big.Int
}

// Size is the length of the key's hash and half its signature, in bytes.
func (k *PublicKey) Size() int { return k.Curve.Bits / 8 }

// Equal tells whether x is the same key (crypto.PublicKey's convention).
func (k *PublicKey) Equal(x crypto.PublicKey) bool {
	o, ok := x.(*PublicKey)
	return ok && o.Curve.Bits == k.Curve.Bits && o.Curve.P.Cmp(k.Curve.P) == 0 &&
		o.X.Cmp(k.X) == 0 && o.Y.Cmp(k.Y) == 0
}

// Bytes is the key's value as certificates and PKCS#11 hold it: x then y,
// each little-endian, each Size bytes.
func (k *PublicKey) Bytes() []byte {
	n := k.Size()
	out := make([]byte, 2*n)
	k.X.FillBytes(out[:n])
	k.Y.FillBytes(out[n:])
	reverseBytes(out[:n])
	reverseBytes(out[n:])
	return out
}

// NewPublicKey reads a key value (x then y, little-endian) on curve c and
// checks that the point is on it.
func NewPublicKey(c *Curve, value []byte) (*PublicKey, error) {
	n := c.Bits / 8
	if len(value) != 2*n {
		return nil, fmt.Errorf("a GOST %d-bit public key is %d bytes, not %d", c.Bits, 2*n, len(value))
	}
	x := new(big.Int).SetBytes(reversed(value[:n]))
	y := new(big.Int).SetBytes(reversed(value[n:]))
	if x.Cmp(c.P) >= 0 || y.Cmp(c.P) >= 0 || !c.onCurve(x, y) {
		return nil, errors.New("the GOST public key is not a point of its curve")
	}
	return &PublicKey{Curve: c, X: x, Y: y}, nil
}

// ErrVerification is returned when a signature does not verify.
var ErrVerification = errors.New("GOST R 34.10-2012 signature does not verify")

// Verify checks sig, in the PKCS#11 and CMS form (s then r, each
// big-endian), over digest, the hash's output bytes as the hash gives them.
func Verify(pub *PublicKey, digest, sig []byte) error {
	c, n := pub.Curve, pub.Size()
	if len(digest) != n {
		return fmt.Errorf("%w: the hash is %d bytes, a %d-bit key signs %d", ErrVerification, len(digest), c.Bits, n)
	}
	if len(sig) != 2*n {
		return fmt.Errorf("%w: the signature is %d bytes, a %d-bit key makes %d", ErrVerification, len(sig), c.Bits, 2*n)
	}
	s := new(big.Int).SetBytes(sig[:n])
	r := new(big.Int).SetBytes(sig[n:])
	if r.Sign() <= 0 || s.Sign() <= 0 || r.Cmp(c.Q) >= 0 || s.Cmp(c.Q) >= 0 {
		return ErrVerification
	}
	e := new(big.Int).SetBytes(reversed(digest)) // the hash is little-endian
	e.Mod(e, c.Q)
	if e.Sign() == 0 {
		e.SetInt64(1)
	}
	v := new(big.Int).ModInverse(e, c.Q)
	z1 := new(big.Int).Mul(s, v)
	z1.Mod(z1, c.Q)
	z2 := new(big.Int).Mul(r, v)
	z2.Neg(z2).Mod(z2, c.Q)
	x1, y1 := c.scalarMult(c.X, c.Y, z1)
	x2, y2 := c.scalarMult(pub.X, pub.Y, z2)
	x, _ := c.add(x1, y1, x2, y2)
	if x == nil {
		return ErrVerification
	}
	if new(big.Int).Mod(x, c.Q).Cmp(r) != 0 {
		return ErrVerification
	}
	return nil
}

func (c *Curve) onCurve(x, y *big.Int) bool {
	l := new(big.Int).Mul(y, y)
	l.Mod(l, c.P)
	r := new(big.Int).Mul(x, x)
	r.Mul(r, x)
	r.Add(r, new(big.Int).Mul(c.A, x))
	r.Add(r, c.B)
	r.Mod(r, c.P)
	return l.Cmp(r) == 0
}

// add adds two affine points; nil stands for the point at infinity.
func (c *Curve) add(x1, y1, x2, y2 *big.Int) (*big.Int, *big.Int) {
	if x1 == nil {
		return x2, y2
	}
	if x2 == nil {
		return x1, y1
	}
	p := c.P
	var lambda *big.Int
	if x1.Cmp(x2) == 0 {
		if new(big.Int).Add(y1, y2).Mod(new(big.Int).Add(y1, y2), p).Sign() == 0 {
			return nil, nil
		}
		num := new(big.Int).Mul(x1, x1)
		num.Mul(num, big.NewInt(3)).Add(num, c.A)
		den := new(big.Int).Lsh(y1, 1)
		lambda = num.Mul(num, den.ModInverse(den.Mod(den, p), p))
	} else {
		num := new(big.Int).Sub(y2, y1)
		den := new(big.Int).Sub(x2, x1)
		den.Mod(den, p)
		lambda = num.Mul(num, den.ModInverse(den, p))
	}
	lambda.Mod(lambda, p)
	x3 := new(big.Int).Mul(lambda, lambda)
	x3.Sub(x3, x1).Sub(x3, x2).Mod(x3, p)
	y3 := new(big.Int).Sub(x1, x3)
	y3.Mul(y3, lambda).Sub(y3, y1).Mod(y3, p)
	return x3, y3
}

// scalarMult is k*(x, y) by double-and-add (public data only: verification
// needs no constant time).
func (c *Curve) scalarMult(x, y, k *big.Int) (*big.Int, *big.Int) {
	var rx, ry *big.Int
	for i := k.BitLen() - 1; i >= 0; i-- {
		rx, ry = c.add(rx, ry, rx, ry)
		if k.Bit(i) == 1 {
			rx, ry = c.add(rx, ry, x, y)
		}
	}
	return rx, ry
}

func reversed(b []byte) []byte {
	out := bytes.Clone(b)
	reverseBytes(out)
	return out
}

func reverseBytes(b []byte) {
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
}
