package rutoken

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"sync"

	"github.com/signagent/signagent/internal/gost"
)

// ATR is the answer to reset of a Rutoken ECP, the first the driver
// matches (the historical bytes spell "Rutoken ECP").
var ATR = []byte{0x3B, 0x8B, 0x01, 0x52, 0x75, 0x74, 0x6F, 0x6B, 0x65, 0x6E, 0x20, 0x45, 0x43, 0x50, 0xA0}

// Status words.
const (
	swOK            = 0x9000
	swVerifyFailed  = 0x6300 // a wrong PIN: the driver then asks 63Cx
	swMemory        = 0x6581
	swWrongLength   = 0x6700
	swNoEF          = 0x6986
	swSecurity      = 0x6982 // security status not satisfied (not logged in)
	swBlocked       = 0x6983
	swConditions    = 0x6985
	swWrongData     = 0x6A80
	swNotSupported  = 0x6A81
	swNotFound      = 0x6A82
	swNoSpace       = 0x6A84
	swWrongP1P2     = 0x6A86
	swNoReference   = 0x6A88
	swExists        = 0x6A89
	swOffset        = 0x6B00
	swINS           = 0x6D00
	swCLA           = 0x6E00
	swEndOfFile     = 0x6282
	swTriesLeftBase = 0x63C0
)

// State is what the card keeps across power and restarts: its serial, its
// file system (keys included) and its PINs with their counters. A blank or
// erased card has no MF.
type State struct {
	Serial []byte  `json:"serial"`
	MF     *File   `json:"mf,omitempty"`
	PINs   []*File `json:"pins,omitempty"`
}

// Card answers APDUs as a Rutoken ECP does for OpenSC's rtecp driver. Its
// methods are safe for concurrent use.
type Card struct {
	mu    sync.Mutex
	st    State
	save  func(*State) error // called after every change of st
	rand  io.Reader
	curDF *File // the current DF (nil: no MF)
	cur   *File // the current file: curDF or a file in it
	// Volatile, cleared by power and LOGOUT: what was verified, the
	// security environment, a chained CHANGE REFERENCE DATA.
	verified map[byte]bool
	envKey   byte
	envOp    byte
	chain    []byte
	// selectKeyFault, when not 0, is the status word every SELECT of a
	// private key object by FID or path answers (SetSelectKeyFault).
	selectKeyFault int
}

// New makes a card from st; save (if not nil) is called with the state after
// every change, before the answer leaves the card.
func New(st State, save func(*State) error) *Card {
	if st.MF != nil {
		st.MF.link()
	}
	c := &Card{st: st, save: save, rand: rand.Reader}
	c.reset()
	return c
}

// Serial is the card's serial number.
func (c *Card) Serial() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return clone(c.st.Serial)
}

// Power switches the card off (on false) or on: either way the PINs are no
// longer verified and the MF is selected.
func (c *Card) Power(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reset()
}

func (c *Card) reset() {
	c.curDF, c.cur = c.st.MF, c.st.MF
	c.verified = map[byte]bool{}
	c.envKey, c.envOp, c.chain = 0, 0, nil
}

// TriesLeft is the count of tries PIN ref has left, or -1 when the card has
// no such PIN.
func (c *Card) TriesLeft(ref byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pin(ref); p != nil {
		return p.Left
	}
	return -1
}

// SetSelectKeyFault makes every SELECT of a private key object (by FID or
// by path; not the file listing) answer sw, as a card whose key was deleted
// or is damaged would (6A82: file not found), until it is called with 0.
// Nothing else changes: the key is still there, the PINs and their
// counters are untouched.
func (c *Card) SetSelectKeyFault(sw int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.selectKeyFault = sw
}

// SelectKeyFault is the status word set by SetSelectKeyFault (0: none).
func (c *Card) SelectKeyFault() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.selectKeyFault
}

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

// IsSignature tells whether cmd is a PSO COMPUTE DIGITAL SIGNATURE, for
// the slow card's delay.
func IsSignature(cmd []byte) bool {
	return len(cmd) >= 4 && cmd[1] == 0x2A && cmd[2] == 0x9E && cmd[3] == 0x9A
}

// IsVerifyWithPIN tells whether cmd is a VERIFY carrying a PIN (not the
// driver's empty VERIFY that asks for the tries left).
func IsVerifyWithPIN(cmd []byte) bool {
	a, ok := parse(cmd)
	return ok && a.cla&0xEF == 0 && a.ins == 0x20 && len(a.data) > 0
}

type command struct {
	cla, ins, p1, p2 byte
	data             []byte
	le               int // 0: none asked
}

// parse reads a short APDU (cases 1 to 4).
func parse(b []byte) (command, bool) {
	if len(b) < 4 {
		return command{}, false
	}
	a := command{cla: b[0], ins: b[1], p1: b[2], p2: b[3]}
	switch {
	case len(b) == 4:
	case len(b) == 5:
		a.le = int(b[4])
		if a.le == 0 {
			a.le = 256
		}
	case b[4] != 0 && len(b) == 5+int(b[4]):
		a.data = b[5:]
	case b[4] != 0 && len(b) == 6+int(b[4]):
		a.data = b[5 : len(b)-1]
		a.le = int(b[len(b)-1])
		if a.le == 0 {
			a.le = 256
		}
	default:
		return command{}, false
	}
	return a, true
}

func word(sw int) []byte { return []byte{byte(sw >> 8), byte(sw)} }

func ok(data []byte) []byte { return append(clone(data), 0x90, 0x00) }

// Transmit answers one command APDU with a response APDU (data, SW1 SW2).
func (c *Card) Transmit(apdu []byte) []byte {
	a, good := parse(apdu)
	if !good {
		return word(swWrongLength)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.cla&0x10 == 0 && a.ins != 0x24 {
		c.chain = nil
	}
	switch {
	case a.cla == 0x80 && a.ins == 0x40:
		c.verified = map[byte]bool{}
		return word(swOK)
	case a.cla == 0x80 && a.ins == 0x8A:
		return c.erase()
	case a.cla == 0x80 && a.ins == 0x84 && a.p1 == 0x4E && a.p2 == 0x19:
		return word(swOK) // the end of initialisation
	case a.cla&0xEF != 0:
		return word(swCLA)
	}
	switch a.ins {
	case 0xA4:
		return c.selectFile(a)
	case 0xB0:
		return c.readBinary(a)
	case 0xD6:
		return c.updateBinary(a)
	case 0xE0:
		return c.createFile(a)
	case 0xE4:
		return c.deleteFile(a)
	case 0x20:
		return c.verify(a)
	case 0x24:
		return c.changeReference(a)
	case 0x2C:
		return c.resetRetryCounter(a)
	case 0x22:
		return c.manageEnvironment(a)
	case 0x2A:
		return c.performOperation(a)
	case 0x46:
		return c.generateKey(a)
	case 0xCA:
		if a.p1 == 0x01 && a.p2 == 0x81 {
			return ok(c.st.Serial)
		}
		return word(swNoReference)
	case 0x84:
		n := a.le
		if n == 0 {
			n = 8
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(c.rand, b); err != nil {
			return word(swMemory)
		}
		return ok(b)
	}
	return word(swINS)
}

// changed saves the state; a card that cannot keep what it was told says so.
func (c *Card) changed(resp []byte) []byte {
	if c.save != nil {
		if err := c.save(&c.st); err != nil {
			return word(swMemory)
		}
	}
	return resp
}

func (c *Card) erase() []byte {
	c.st.MF, c.st.PINs = nil, nil
	c.reset()
	return c.changed(word(swOK))
}

func (c *Card) pin(ref byte) *File {
	for _, p := range c.st.PINs {
		if p.ID == uint16(ref) {
			return p
		}
	}
	return nil
}

// choose makes f the current file (and its DF the current DF).
func (c *Card) choose(f *File) {
	c.cur = f
	if f.isDF() {
		c.curDF = f
	} else if f.parent != nil {
		c.curDF = f.parent
	}
}

func (c *Card) selectFile(a command) []byte {
	if c.st.MF == nil || c.curDF == nil {
		return word(swNotFound)
	}
	var f *File
	direct := false // by FID or path, not the listing's first or next
	switch {
	case a.p1 == 0x00 && a.p2 == 0x02 && len(a.data) == 2:
		// The next file after FID in the current DF (the file listing).
		id := binary.BigEndian.Uint16(a.data)
		for i, k := range c.curDF.Kids {
			if k.ID == id && i+1 < len(c.curDF.Kids) {
				f = c.curDF.Kids[i+1]
			}
		}
	case a.p1 == 0x00 && len(a.data) == 0:
		// The first file of the current DF (the file listing).
		if len(c.curDF.Kids) > 0 {
			f = c.curDF.Kids[0]
		}
	case a.p1 == 0x00 && len(a.data) == 2:
		direct = true
		id := binary.BigEndian.Uint16(a.data)
		switch {
		case id == mfID:
			f = c.st.MF
		case c.curDF.child(id) != nil:
			f = c.curDF.child(id)
		case c.curDF.ID == id:
			f = c.curDF
		case c.curDF.parent != nil && c.curDF.parent.child(id) != nil:
			f = c.curDF.parent.child(id)
		}
	case a.p1 == 0x03:
		if c.curDF.parent == nil {
			return word(swNotFound)
		}
		c.choose(c.curDF.parent)
		return word(swOK)
	case a.p1 == 0x08 && len(a.data)%2 == 0 && len(a.data) > 0:
		ids := make([]uint16, len(a.data)/2)
		for i := range ids {
			ids[i] = binary.BigEndian.Uint16(a.data[2*i:])
		}
		f = c.st.MF.walk(ids)
		direct = true
	default:
		return word(swWrongP1P2)
	}
	if f == nil {
		return word(swNotFound)
	}
	if direct && c.selectKeyFault != 0 && f.Desc == descInternal && isKey(f) && !isPublicKey(f) {
		return word(c.selectKeyFault)
	}
	c.choose(f)
	if a.p2&0x0C == 0x0C {
		return word(swOK)
	}
	return ok(f.fci())
}

func (c *Card) currentEF() *File {
	if c.cur == nil || c.cur.Desc != descEF {
		return nil
	}
	return c.cur
}

func (c *Card) readBinary(a command) []byte {
	f := c.currentEF()
	if f == nil || a.p1&0x80 != 0 {
		return word(swNoEF)
	}
	off := int(a.p1)<<8 | int(a.p2)
	switch {
	case off > len(f.Data):
		return word(swOffset)
	case off == len(f.Data):
		return word(swEndOfFile)
	}
	end := min(off+a.le, len(f.Data))
	if a.le == 0 {
		end = len(f.Data)
	}
	return ok(f.Data[off:end])
}

func (c *Card) updateBinary(a command) []byte {
	f := c.currentEF()
	if f == nil || a.p1&0x80 != 0 {
		return word(swNoEF)
	}
	off := int(a.p1)<<8 | int(a.p2)
	if off+len(a.data) > len(f.Data) {
		return word(swNoSpace)
	}
	copy(f.Data[off:], a.data)
	return c.changed(word(swOK))
}

// keyKind tells a key object's kind from its proprietary attributes' first
// byte: 03/13 GOST private/public, 23/33 RSA private/public; PINs are 01.
func isKey(f *File) bool { return len(f.Prop) > 0 && f.Prop[0]&0x0F == 3 }

func isPublicKey(f *File) bool { return f.Prop[0]&0x10 != 0 }

func isGOSTKey(f *File) bool { return f.Prop[0]&0x20 == 0 }

func isPIN(f *File) bool { return len(f.Prop) >= 4 && f.Prop[0] == 0x01 }

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

func (c *Card) createFile(a command) []byte {
	f, err := fileFromFCI(a.data)
	if err != nil {
		return word(swWrongData)
	}
	switch {
	case f.ID == mfID && f.isDF():
		if c.st.MF != nil {
			return word(swExists)
		}
		c.st.MF = f
		c.choose(f)
		return c.changed(word(swOK))
	case f.Desc == descInternal && isPIN(f):
		if c.pin(byte(f.ID)) != nil {
			return word(swExists)
		}
		f.Left = int(f.Prop[3] & 0x0F)
		c.st.PINs = append(c.st.PINs, f)
		return c.changed(word(swOK))
	}
	dir := c.curDF
	if f.Desc == descInternal && isKey(f) {
		ids := privateKeyDF
		if isPublicKey(f) {
			ids = publicKeyDF
		}
		dir = c.st.MF.walk(ids)
	}
	if dir == nil || !dir.isDF() {
		return word(swNotFound)
	}
	if dir.child(f.ID) != nil {
		return word(swExists)
	}
	f.parent = dir
	dir.Kids = append(dir.Kids, f)
	c.choose(f)
	return c.changed(word(swOK))
}

func (c *Card) deleteFile(a command) []byte {
	f := c.cur
	if len(a.data) == 2 {
		f = nil
		if c.curDF != nil {
			f = c.curDF.child(binary.BigEndian.Uint16(a.data))
		}
	}
	if f == nil || f.parent == nil {
		return word(swNotFound)
	}
	f.parent.remove(f)
	c.choose(f.parent)
	return c.changed(word(swOK))
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
