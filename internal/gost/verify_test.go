package gost

import (
	"encoding/hex"
	"errors"
	"math/big"
	"testing"
)

// Every parameter set's base point is on its curve and of the prime order
// the set says.
func TestCurvesConsistent(t *testing.T) {
	for _, c := range append(Curves(), testCurve) {
		if !c.onCurve(c.X, c.Y) {
			t.Errorf("%s: base point not on the curve", c.Name)
		}
		if x, _ := c.scalarMult(c.X, c.Y, c.Q); x != nil {
			t.Errorf("%s: q*G is not the point at infinity", c.Name)
		}
		if !c.Q.ProbablyPrime(20) || !c.P.ProbablyPrime(20) {
			t.Errorf("%s: p or q not prime", c.Name)
		}
		if c.P.BitLen() != c.Bits && c.P.BitLen() != c.Bits-1 && c.Name != "CryptoPro-C" {
			t.Errorf("%s: p has %d bits", c.Name, c.P.BitLen())
		}
	}
}

// The worked example of GOST R 34.10-2012 appendix A.1 (RFC 7091 section
// 7.1), in the wire forms gost.md settles: the hash bytes little-endian,
// the value s then r, the public key x then y each little-endian.
func TestVerifyStandardExample(t *testing.T) {
	c := testCurve
	d := hexInt("7A929ADE789BB9BE10ED359DD39A72C11B60961F49397EEE1D19CE9891EC3B28")
	qx, qy := c.scalarMult(c.X, c.Y, d)
	wantX := hexInt("7F2B49E270DB6D90D8595BEC458B50C58585BA1D4E9B788F6689DBD8E56FD80B")
	wantY := hexInt("26F1B489D6701DD185C8413A977B3CBBAF64D1C593D26627DFFB101A87FF77DA")
	if qx.Cmp(wantX) != 0 || qy.Cmp(wantY) != 0 {
		t.Fatalf("Q = d*P: got (%X, %X)", qx, qy)
	}
	pub := &PublicKey{Curve: c, X: qx, Y: qy}
	if got := hex.EncodeToString(pub.Bytes()); got[:8] != "0bd86fe5" || got[len(got)-8:] != "89b4f126" {
		t.Fatalf("key value %s", got)
	}
	again, err := NewPublicKey(c, pub.Bytes())
	if err != nil || !again.Equal(pub) {
		t.Fatalf("key value does not read back: %v", err)
	}
	e := hexInt("2DFBC1B372D89A1188C09C52E0EEC61FCE52032AB1022E8E67ECE6672B043EE5")
	digest := reversed(e.FillBytes(make([]byte, 32)))
	r := hexInt("41AA28D2F1AB148280CD9ED56FEDA41974053554A42767B83AD043FD39DC0493")
	s := hexInt("01456C64BA4642A1653C235A98A60249BCD6D3F746B631DF928014F6C5BF9C40")
	sig := append(s.FillBytes(make([]byte, 32)), r.FillBytes(make([]byte, 32))...)
	if err := Verify(pub, digest, sig); err != nil {
		t.Fatalf("the standard's example does not verify: %v", err)
	}
	// Each classic mistake is refused: r then s, the value reversed, each
	// half reversed, the hash read big-endian, a changed hash.
	swapped := append(append([]byte{}, sig[32:]...), sig[:32]...)
	halves := append(reversed(sig[:32]), reversed(sig[32:])...)
	changed := append([]byte{}, digest...)
	changed[0] ^= 1
	for name, c := range map[string][2][]byte{
		"r then s":        {digest, swapped},
		"value reversed":  {digest, reversed(sig)},
		"halves reversed": {digest, halves},
		"hash big-endian": {reversed(digest), sig},
		"changed hash":    {changed, sig},
		"short":           {digest, sig[:63]},
		"zero r":          {digest, append(append([]byte{}, sig[:32]...), make([]byte, 32)...)},
	} {
		if err := Verify(pub, c[0], c[1]); !errors.Is(err, ErrVerification) {
			t.Errorf("%s: got %v, want a refusal", name, err)
		}
	}
	// e = 0 mod q is taken as 1 (the standard's rule), not a division by zero.
	zero := reversed(new(big.Int).Set(c.Q).FillBytes(make([]byte, 32)))
	if err := Verify(pub, zero, sig); !errors.Is(err, ErrVerification) {
		t.Errorf("e = q: %v", err)
	}
}

func TestPublicKeyOffCurve(t *testing.T) {
	c := CurveByOID(OIDPublicKey256)
	if c != nil {
		t.Fatal("a key algorithm OID is not a parameter set")
	}
	c = curves[0]
	v := (&PublicKey{Curve: c, X: c.X, Y: c.Y}).Bytes()
	v[40] ^= 1
	if _, err := NewPublicKey(c, v); err == nil {
		t.Fatal("a point off the curve was accepted")
	}
	if _, err := NewPublicKey(c, v[:63]); err == nil {
		t.Fatal("a short key was accepted")
	}
}
