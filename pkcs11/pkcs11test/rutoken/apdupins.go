package rutoken

import (
	"crypto/subtle"
	"encoding/binary"
)

// The PINs' commands: VERIFY, CHANGE REFERENCE DATA (a PIN, or key
// material into the selected key object) and RESET RETRY COUNTER.

func (c *Card) pin(ref byte) *File {
	for _, p := range c.st.PINs {
		if p.ID == uint16(ref) {
			return p
		}
	}
	return nil
}

func tries(n int) int { return swTriesLeftBase | min(n, 15) }

func (c *Card) verify(a command) []byte {
	if a.p1 != 0 {
		return word(swWrongP1P2)
	}
	p := c.pin(a.p2)
	if p == nil {
		return word(swNoReference)
	}
	if len(a.data) == 0 {
		// A query: the driver's second VERIFY after 6300.
		if c.verified[a.p2] {
			return word(swOK)
		}
		return word(tries(p.Left))
	}
	if p.Left == 0 {
		return word(swBlocked)
	}
	if len(p.Data) > 0 && subtle.ConstantTimeCompare(a.data, p.Data) == 1 {
		c.verified[a.p2] = true
		if p.Left == int(p.Prop[3]&0x0F) {
			return word(swOK)
		}
		p.Left = int(p.Prop[3] & 0x0F)
		return c.changed(word(swOK))
	}
	p.Left--
	delete(c.verified, a.p2)
	return c.changed(word(swVerifyFailed))
}

// changeReference is CHANGE REFERENCE DATA as the driver sends it: 80 02
// with the value's length, then A5 TLVs, chained (CLA 10) when long. Ref 0
// loads key material into the selected key object; 1 and 2 set a PIN.
func (c *Card) changeReference(a command) []byte {
	if a.p1 != 0x01 {
		return word(swWrongP1P2)
	}
	if a.cla&0x10 != 0 {
		c.chain = append(c.chain, a.data...)
		return word(swOK)
	}
	all := append(c.chain, a.data...)
	c.chain = nil
	if len(all) < 4 || all[0] != 0x80 || all[1] != 0x02 {
		return word(swWrongData)
	}
	want := int(binary.BigEndian.Uint16(all[2:4]))
	var value []byte
	for rest := all[4:]; len(rest) > 0; {
		if len(rest) < 2 || rest[0] != 0xA5 || len(rest) < 2+int(rest[1]) {
			return word(swWrongData)
		}
		value = append(value, rest[2:2+int(rest[1])]...)
		rest = rest[2+int(rest[1]):]
	}
	if len(value) != want {
		return word(swWrongLength)
	}
	if a.p2 == 0 {
		k := c.cur
		if k == nil || k.Desc != descInternal || !isKey(k) {
			return word(swConditions)
		}
		k.Data = value
		return c.changed(word(swOK))
	}
	p := c.pin(a.p2)
	if p == nil {
		return word(swNoReference)
	}
	if len(p.Data) > 0 && !c.verified[a.p2] && !c.verified[1] {
		return word(swSecurity)
	}
	p.Data, p.Left = value, int(p.Prop[3]&0x0F)
	return c.changed(word(swOK))
}

// resetRetryCounter unblocks PIN ref when the PIN its security attributes
// name (86's second byte: 1 the SO PIN, FF never) is verified.
func (c *Card) resetRetryCounter(a command) []byte {
	if a.p1 != 0x03 {
		return word(swWrongP1P2)
	}
	p := c.pin(a.p2)
	if p == nil {
		return word(swNoReference)
	}
	switch by := p.Sec[1]; {
	case by == 0xFF:
		return word(swConditions)
	case by != 0 && !c.verified[by]:
		return word(swSecurity)
	}
	p.Left = int(p.Prop[3] & 0x0F)
	return c.changed(word(swOK))
}
