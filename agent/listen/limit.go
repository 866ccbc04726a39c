package listen

import (
	"net"
	"sync"
)

// Connection caps: a listener accepts no more connections than this at a
// time; the rest wait in the kernel's backlog, costing the agent no file
// descriptor. TCP has its own, smaller budget, so that a flood of loopback
// connections cannot starve the callers on the Unix socket.
const (
	DefaultMaxConnsUnix = 512
	DefaultMaxConnsTCP  = 128
)

// limitListener accepts at most cap(sem) connections at a time.
type limitListener struct {
	net.Listener
	sem chan struct{}
}

// Limit caps l at n connections at a time.
func Limit(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Underlying is the connection below the cap, for a connection a capped
// listener accepted (SO_PEERCRED needs the Unix one); any other is c.
func Underlying(c net.Conn) net.Conn {
	if lc, ok := c.(*limitConn); ok {
		return lc.Conn
	}
	return c
}
