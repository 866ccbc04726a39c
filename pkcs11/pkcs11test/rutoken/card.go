package rutoken

import (
	"crypto/rand"
	"io"
	"sync"
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
