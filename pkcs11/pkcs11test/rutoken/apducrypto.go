package rutoken

import (
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"

	"github.com/signagent/signagent/internal/gost"
)

// The keys' commands: MANAGE SECURITY ENVIRONMENT, PERFORM SECURITY
// OPERATION (a GOST signature) and GENERATE KEY, and a key object's
// public key and parameter set.

// PublicKey is the value of the public key with reference ref (x then y,
// little-endian) and its parameter set, or nil.
func (c *Card) PublicKey(ref byte) (*gost.PublicKey, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.st.MF.walk(append(publicKeyDF, uint16(ref)))
	if k == nil || len(k.Data) == 0 {
		return nil, fmt.Errorf("the card has no public key %d", ref)
	}
	curve, err := keyCurve(k)
	if err != nil {
		return nil, err
	}
	return gost.NewPublicKey(curve, k.Data)
}

// keyCurve is a GOST key object's parameter set: 85's second byte is 0x10 +
// (paramset << 4), paramset 1 to 3 being CryptoPro A to C.
func keyCurve(f *File) (*gost.Curve, error) {
	if !isKey(f) || !isGOSTKey(f) || len(f.Prop) < 2 {
		return nil, errors.New("not a GOST key object")
	}
	set := int(f.Prop[1]-0x10) >> 4
	if set < 1 || set > 3 {
		return nil, fmt.Errorf("unknown GOST parameter set %d", set)
	}
	return gost.CurveByOID(asn1.ObjectIdentifier{1, 2, 643, 2, 2, 35, set}), nil
}

func (c *Card) manageEnvironment(a command) []byte {
	if a.p1 == 0xF3 {
		c.envKey, c.envOp = 0, 0
		return word(swOK)
	}
	if a.p1 != 0x41 || (a.p2 != 0xB6 && a.p2 != 0xB8) {
		return word(swWrongP1P2)
	}
	m, err := parseTLVs(a.data)
	if err != nil || len(m[0x84]) != 1 {
		return word(swWrongData)
	}
	c.envKey, c.envOp = m[0x84][0], a.p2
	return word(swOK)
}

func (c *Card) performOperation(a command) []byte {
	if a.p1 == 0x80 && a.p2 == 0x86 {
		return word(swNotSupported) // RSA decipher: not this card's
	}
	if a.p1 != 0x9E || a.p2 != 0x9A {
		return word(swWrongP1P2)
	}
	if c.envOp != 0xB6 {
		return word(swConditions)
	}
	k := c.st.MF.walk(append(privateKeyDF, uint16(c.envKey)))
	if k == nil {
		return word(swNoReference)
	}
	curve, err := keyCurve(k)
	if err != nil || len(k.Data) != 32 {
		return word(swConditions)
	}
	// 86's fourth byte names the PIN that allows the key's use.
	if use := k.Sec[3]; use != 0 && use != 0xFF && !c.verified[use] {
		return word(swSecurity)
	}
	if len(a.data) != 32 {
		return word(swWrongLength)
	}
	d := new(big.Int).SetBytes(reversedBytes(k.Data))
	sig, err := gost.Sign(curve, d, a.data, c.rand)
	if err != nil {
		return word(swConditions)
	}
	// gost.Sign gives s then r, big-endian; the card sends r then s,
	// little-endian (the driver reverses the whole answer).
	return ok(append(reversedBytes(sig[32:]), reversedBytes(sig[:32])...))
}

func (c *Card) generateKey(a command) []byte {
	if a.p1 != 0x80 {
		return word(swWrongP1P2)
	}
	pr := c.st.MF.walk(append(privateKeyDF, uint16(a.p2)))
	pu := c.st.MF.walk(append(publicKeyDF, uint16(a.p2)))
	if pr == nil || pu == nil {
		return word(swNoReference)
	}
	curve, err := keyCurve(pr)
	if err != nil {
		return word(swNotSupported) // RSA keys are not this card's
	}
	d, pub, err := gost.GenerateEphemeral(curve, c.rand)
	if err != nil {
		return word(swMemory)
	}
	pr.Data = reversedBytes(d.FillBytes(make([]byte, 32)))
	pu.Data = pub.Bytes()
	return c.changed(ok(pu.Data))
}

func reversedBytes(b []byte) []byte {
	out := make([]byte, len(b))
	for i, x := range b {
		out[len(b)-1-i] = x
	}
	return out
}
