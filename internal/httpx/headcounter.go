package httpx

import "bytes"

// HeadCounter counts the header fields and bytes of the HTTP/1.x answer
// heads in the bytes read from a connection, before net/http's reader
// parses them, and fails the read that brings a head past its bounds. Armed
// (a head comes next), it takes the bytes that start with "HTTP/" for a
// head (any other, TLS records included, for no head: net/http refuses an
// answer that does not start so) and counts its lines as
// net/textproto.ReadMIMEHeader reads them: a line that starts with a space
// or a tab continues its field, an empty line (LF or CRLF) ends the head.
// After an interim answer (1xx but 101) or a status it cannot read, the
// next bytes are taken for another head (net/http reads one, or refuses
// the answer), its fields counted afresh and its bytes with the heads'
// before it; after a final head it is idle (the body is not counted)
// until armed again. It allocates nothing. Not safe for concurrent use.
type HeadCounter struct {
	limits HeadLimits // Bytes 0: bytes not counted
	state  uint8
	k      int // bytes of "HTTP/" seen
	fields int
	bytes  int64
	code   [4]byte // the status code, as far as read
	codeN  int
	done   bool // a final head was counted since Arm
	err    error
}

const (
	hcIdle      = iota
	hcSniff     // "HTTP/"
	hcProto     // the rest of the version, up to a space
	hcSpace     // spaces before the status code
	hcCode      // the status code
	hcReason    // the rest of the status line
	hcLineStart // the start of a field line (or of the blank line)
	hcLineCR    // a line that so far is a CR
	hcInLine    // within a field line
)

// NewHeadCounter counts heads within l (its Bytes 0: fields alone).
func NewHeadCounter(l HeadLimits) HeadCounter { return HeadCounter{limits: l} }

// Arm says an answer's heads come next (a request is written). The
// bounds are counted afresh; an error stays.
func (c *HeadCounter) Arm() {
	c.nextHead()
	c.bytes, c.done = 0, false
}

// nextHead: another head of the same answer comes next, its fields
// counted afresh, its bytes with the heads' before it.
func (c *HeadCounter) nextHead() { c.state, c.k, c.fields, c.codeN = hcSniff, 0, 0, 0 }

// Done reports whether the counter read an answer's final head since Arm.
func (c *HeadCounter) Done() bool { return c.done }

// Disarm stops counting until Arm.
func (c *HeadCounter) Disarm() { c.state = hcIdle }

// Idle reports whether the counter is not within a head nor expects one.
func (c *HeadCounter) Idle() bool { return c.state == hcIdle }

// Scan takes the next bytes read. Once a head passed a bound it returns
// a *HeadError (and does for every call after it) with the length of p's
// bytes before the one that passed it: given on, with the error only on
// the next read, they leave net/http a whole line to read before it
// (bufio.Reader.ReadLine drops the error that ends a line it cut) when
// the head passed its fields.
func (c *HeadCounter) Scan(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	for i := 0; i < len(p) && c.state != hcIdle; {
		start := i
		i = c.step(p, i)
		c.bytes += int64(i - start)
		if c.err != nil {
			return i, c.err
		}
		if c.limits.Bytes > 0 && c.bytes > c.limits.Bytes {
			c.err = &HeadError{Bytes: c.limits.Bytes}
			return i - int(c.bytes-c.limits.Bytes), c.err
		}
	}
	return len(p), nil
}

// Err is the error Scan returned, if any.
func (c *HeadCounter) Err() error { return c.err }

// Took is what a reader beneath a head parser returns for a read of
// p[:n] that gave err, counted by c: n and err; or, when the read brought
// a head past a bound, the bytes before the one that passed, the error
// with the next read (Scan), and the error at once when there are none.
// A reader calls it after each read, once it returned c.Err() (if any)
// without reading.
func (c *HeadCounter) Took(p []byte, n int, err error) (int, error) {
	if n <= 0 || c.state == hcIdle {
		return n, err
	}
	ok, serr := c.Scan(p[:n])
	switch {
	case serr == nil:
		return n, err
	case ok == 0:
		return 0, serr
	}
	return ok, nil
}

var httpPrefix = []byte("HTTP/")

// step takes p[i:] up to the next change of state (a whole line's rest
// at once) and returns where it stopped.
func (c *HeadCounter) step(p []byte, i int) int {
	b := p[i]
	switch c.state {
	case hcSniff:
		if c.k == 0 && bytes.HasPrefix(p[i:], httpPrefix) {
			c.k, c.state = len(httpPrefix), hcProto
			return i + len(httpPrefix)
		}
		if b != httpPrefix[c.k] {
			c.state = hcIdle // not a head: net/http refuses it, or it is TLS
			return i
		}
		if c.k++; c.k == len(httpPrefix) {
			c.state = hcProto
		}
	case hcProto:
		switch b {
		case ' ':
			c.state = hcSpace
		case '\n':
			c.endStatusLine()
		}
	case hcSpace:
		if b == ' ' {
			break
		}
		c.state = hcCode
		return i // the code's first byte
	case hcCode:
		switch {
		case b == ' ' || b == '\r':
			c.state = hcReason
		case b == '\n':
			c.endStatusLine()
		case c.codeN < len(c.code):
			c.code[c.codeN] = b
			c.codeN++
		}
	case hcReason:
		j := bytes.IndexByte(p[i:], '\n')
		if j < 0 {
			return len(p)
		}
		c.endStatusLine()
		return i + j + 1
	case hcLineStart, hcLineCR:
		switch {
		case b == '\n':
			c.endHead()
		case b == '\r' && c.state == hcLineStart:
			c.state = hcLineCR
		case (b == ' ' || b == '\t') && c.state == hcLineStart:
			c.state = hcInLine // a continuation: the same field
		default:
			// A new field (a line that starts with CR and goes on is one
			// too, which net/http refuses).
			if c.fields++; c.fields > c.limits.Fields {
				c.err = &HeadError{Fields: c.limits.Fields}
				return i
			}
			c.state = hcInLine // b is the line's, and not its end
			return c.step(p, i)
		}
	case hcInLine:
		j := bytes.IndexByte(p[i:], '\n')
		if j < 0 {
			return len(p)
		}
		c.state = hcLineStart
		return i + j + 1
	}
	return i + 1
}

func (c *HeadCounter) endStatusLine() { c.state = hcLineStart }

// endHead: after a final answer the body follows, not counted; after an
// interim one, or a status the counter cannot tell is final, another head.
func (c *HeadCounter) endHead() {
	code := c.code[:c.codeN]
	final := c.codeN == 3 && isDigit(code[0]) && isDigit(code[1]) && isDigit(code[2]) &&
		(code[0] != '1' || string(code) == "101")
	if final {
		c.state, c.done = hcIdle, true
		return
	}
	c.nextHead()
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }
