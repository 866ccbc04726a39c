package proxy

import (
	"errors"
	"net"
	"net/http"

	"github.com/signagent/signagent/internal/httpx"
)

// headLimit is the reader beneath a connection's bufio.Reader: it lets
// through at most n bytes while the answer's head is read (as
// http.Transport's readLimit does), and any number once n is lifted; and
// its counter, armed while the head is read, fails the read that brings
// a head past its fields, before net/http parses them (a field costs
// about 400 bytes to hold: issue 45).
type headLimit struct {
	r      net.Conn
	n      int64
	fields httpx.HeadCounter
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errHeadTooLarge
	}
	if err := l.fields.Err(); err != nil {
		return 0, err
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return l.fields.Took(p, n, err)
}

// noLimit is headLimit's n once the head was read.
const noLimit = 1<<63 - 1

// errHeadTooLarge is an answer's head past its bytes. An answer's head is
// bounded by its bytes, interim answers counted in them (as
// http.Transport counts them in MaxResponseHeaderBytes, with no count of
// its own), and each head by its fields (Target's HeadLimits): past
// either the answer is refused (502) and its connection closed.
var errHeadTooLarge = errors.New("the service's answer head is larger than the proxy takes")

// newHeadLimit is the head limit of a connection to u, reading r.
func (u *upstream) newHeadLimit(r net.Conn) *headLimit {
	return &headLimit{r: r, n: noLimit, fields: httpx.NewHeadCounter(httpx.HeadLimits{Fields: u.maxFields})}
}

// readHead reads the answer's head, past any interim answers (100
// Continue, 103 Early Hints: the body has been sent already), through
// the connection's head limit.
func (u *upstream) readHead(c *upConn, req *http.Request) (*http.Response, error) {
	c.lr.n = u.maxHead
	c.lr.fields.Arm()
	defer func() { c.lr.n = noLimit; c.lr.fields.Disarm() }()
	if _, err := c.br.Peek(1); err != nil {
		return nil, headErr(u, c, staleOr(err))
	}
	for {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, headErr(u, c, err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
}

// headErr is the error of a head that could not be read: a bound it
// passed (whatever net/http made of the cut line; the proxy's error
// names the setting: upstreamError.classified), or err.
func headErr(u *upstream, c *upConn, err error) error {
	switch {
	case c.lr.fields.Err() != nil:
		return &httpx.HeadError{Fields: u.maxFields}
	case c.lr.n <= 0 || errors.Is(err, errHeadTooLarge):
		return &httpx.HeadError{Bytes: u.maxHead}
	}
	return err
}

// headSetting is e naming the agent's setting of the bound it passed.
func headSetting(e *httpx.HeadError) *httpx.HeadError {
	h := *e
	h.Setting = "--service-max-header-fields"
	if h.Fields == 0 {
		h.Setting = "--service-max-header-bytes"
	}
	return &h
}
