package agent

import (
	"net"
	"sync"
	"time"
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

func limit(l net.Listener, n int) net.Listener {
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

// unwrapConn gives the connection below (SO_PEERCRED needs the Unix one).
func (c *limitConn) unwrapConn() net.Conn { return c.Conn }

// sampler lets through at most burst events per period and counts the rest,
// so that a caller refused in a loop cannot fill the logs.
type sampler struct {
	burst  int
	period time.Duration

	mu         sync.Mutex
	start      time.Time
	n          int
	suppressed int
}

func newSampler(burst int, period time.Duration) *sampler {
	return &sampler{burst: burst, period: period}
}

// allow reports whether to record this event, and how many were suppressed
// since the last one recorded.
func (s *sampler) allow(now time.Time) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.start) >= s.period {
		s.start, s.n = now, 0
	}
	if s.n >= s.burst {
		s.suppressed++
		return false, 0
	}
	s.n++
	sup := s.suppressed
	s.suppressed = 0
	return true, sup
}
