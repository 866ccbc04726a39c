package rutoken

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// vpcd's protocol (vsmartcard's reader driver, loaded by pcscd; spoken here
// from its documentation, not its code): every message both ways is a
// 2-byte big-endian length and that many bytes. A 1-byte message from vpcd
// is a control code: 0 power off, 1 power on, 2 reset (no answer to these
// three), 4 get ATR (answered with the ATR). A longer one is a command APDU,
// answered with the response APDU. An empty answer makes vpcd drop the
// card. vpcd listens, the card connects: a closed connection is a removed
// card, a new one an inserted card. vpcd asks for the ATR at each of
// pcscd's polls.

// Server connects a Card to vpcd and serves the rig's control socket.
type Server struct {
	Card *Card
	// Port is vpcd's first reader's port on 127.0.0.1; reader N is on
	// Port+N.
	Port int
	Log  *log.Logger
	// LogAPDUs logs every APDU (a PIN's or a key's bytes hidden) and its
	// answer.
	LogAPDUs bool

	mu        sync.Mutex
	reader    int
	inserted  bool
	conn      *link // nil when not connected
	delay     time.Duration
	signDelay time.Duration
	// removeAfterVerify: take the card out right after the next VERIFY
	// with a PIN that the card answers 9000 (the fault
	// remove-after-verify), once.
	removeAfterVerify bool
}

// link is one connection to vpcd: one insertion of the card.
type link struct {
	net.Conn
	gone chan struct{} // closed when the card is taken out
	once sync.Once
}

func (l *link) drop() {
	l.once.Do(func() {
		close(l.gone)
		l.Close()
	})
}

// NewServer makes a server for card in reader, inserted, with delay before
// every answer and signDelay more before a signature's.
func NewServer(card *Card, port, reader int, delay, signDelay time.Duration, logger *log.Logger) *Server {
	return &Server{Card: card, Port: port, Log: logger, reader: reader, inserted: true, delay: delay, signDelay: signDelay}
}

// Run serves until ctx ends: it connects to vpcd whenever the card is in
// and not connected (every 50 ms while vpcd does not listen), and answers
// the control socket's commands.
func (s *Server) Run(ctx context.Context, control net.Listener) error {
	go func() {
		<-ctx.Done()
		control.Close()
		s.remove("stopped")
	}()
	go s.controlLoop(control)
	for ctx.Err() == nil {
		s.connect()
		s.mu.Lock()
		l := s.conn
		s.mu.Unlock()
		if l == nil {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		err := s.serve(l)
		s.mu.Lock()
		if s.conn == l {
			s.conn = nil
			s.Log.Printf("disconnected from vpcd: %v", err)
		}
		s.mu.Unlock()
		l.drop()
		s.Card.Power(false)
	}
	return nil
}

// connect connects to vpcd when the card is in and not connected.
func (s *Server) connect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.inserted || s.conn != nil {
		return
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port+s.reader))
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return
	}
	c.(*net.TCPConn).SetNoDelay(true)
	s.conn = &link{Conn: c, gone: make(chan struct{})}
	s.Log.Printf("connected to vpcd on %s (reader %d)", addr, s.reader)
}

// remove takes the card out: powered off, its connection closed.
func (s *Server) remove(why string) {
	s.mu.Lock()
	l := s.conn
	s.conn = nil
	s.mu.Unlock()
	if l != nil {
		s.Card.Power(false)
		l.drop()
		s.Log.Printf("disconnected from vpcd: %s", why)
	}
}

// quickAck re-arms TCP_QUICKACK before a read: the kernel clears it by
// itself, and without it vpcd's Nagle waits for this side's delayed ACK
// between a message's length and its body (about 40 ms a message).
func quickAck(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	if rc, err := tc.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
		})
	}
}

func readMsg(c net.Conn) ([]byte, error) {
	var hdr [2]byte
	quickAck(c)
	c.SetReadDeadline(time.Time{})
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(hdr[:]))
	quickAck(c)
	// vpcd sends a message's length and body together: a body that stalls
	// means a broken connection, not a slow one.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, msg); err != nil {
		return nil, fmt.Errorf("inside a message: %w", err)
	}
	return msg, nil
}

func writeMsg(c net.Conn, b []byte) error {
	_, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...))
	return err
}

// serve answers vpcd on l until the connection ends.
func (s *Server) serve(l *link) error {
	for {
		msg, err := readMsg(l.Conn)
		if err != nil {
			return err
		}
		if len(msg) == 1 {
			switch msg[0] {
			case 0, 1, 2:
				s.Card.Power(msg[0] != 0)
			case 4:
				if err := writeMsg(l, ATR); err != nil {
					return err
				}
			default:
				s.Log.Printf("unknown control code %d from vpcd", msg[0])
			}
			continue
		}
		resp := s.Card.Transmit(msg)
		if s.LogAPDUs {
			s.Log.Print(describe(msg, resp))
		}
		sign := IsSignature(msg)
		verified := IsVerifyWithPIN(msg) && len(resp) == 2 && resp[0] == 0x90 && resp[1] == 0x00
		clear(msg) // a VERIFY's PIN does not stay in memory
		s.mu.Lock()
		wait := s.delay
		if sign {
			wait += s.signDelay
		}
		s.mu.Unlock()
		if wait > 0 {
			select {
			case <-l.gone:
				return fmt.Errorf("removed during a command")
			case <-time.After(wait):
			}
		}
		if err := writeMsg(l, resp); err != nil {
			return err
		}
		if verified && s.takeRemoveAfterVerify() {
			// The answer is on its way to vpcd; the card goes out before
			// the next command (the key's SELECT, MSE, PSO) reaches it.
			s.remove("card removed right after a VERIFY (fault remove-after-verify)")
			return fmt.Errorf("removed after a VERIFY")
		}
	}
}

// takeRemoveAfterVerify disarms the fault remove-after-verify and tells
// whether it was armed; when it was, the card is marked out, as by the
// command remove.
func (s *Server) takeRemoveAfterVerify() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.removeAfterVerify {
		return false
	}
	s.removeAfterVerify = false
	s.inserted = false
	return true
}

// describe is an APDU's log line: the header, the data (hidden for VERIFY
// and CHANGE REFERENCE DATA: PINs and key material), Le, then the status
// word and the answer's data.
func describe(cmd, resp []byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "APDU % X", cmd[:min(4, len(cmd))])
	if a, ok := parse(cmd); ok {
		switch {
		case len(a.data) > 0 && (a.ins == 0x20 || a.ins == 0x24):
			fmt.Fprintf(&b, " [%d bytes hidden]", len(a.data))
		case len(a.data) > 0:
			fmt.Fprintf(&b, " [%d] %s", len(a.data), hex.EncodeToString(a.data))
		}
		if a.le > 0 {
			fmt.Fprintf(&b, " Le=%d", a.le)
		}
	}
	n := len(resp)
	fmt.Fprintf(&b, " -> %02X%02X", resp[n-2], resp[n-1])
	if n > 2 {
		fmt.Fprintf(&b, " [%d] %s", n-2, hex.EncodeToString(resp[:n-2]))
	}
	return b.String()
}

// The control socket takes one command per connection, one line, and
// answers one line ("ok", a value, or "error: ..."), as the libcacard
// bridge's does:
//
//	remove          take the card out
//	insert [N]      put it back, into reader N (the one it was in when N
//	                is left out): "ok" once connected, "ok waiting" when
//	                vpcd does not listen yet
//	delay MS        wait MS before every answer
//	signdelay MS    wait MS more before a signature's answer
//	tries           the user PIN's tries left (0: blocked)
//	pubkey [REF]    key REF's (1) public key: its curve's name and x||y
//	                little-endian in hex
//	status          "inserted|removed connected|waiting reader=N tries=N"
//	fault select-key SW
//	                every SELECT of a private key object (by FID or path)
//	                answers SW (4 hex digits, e.g. 6A82) until cleared
//	fault remove-after-verify
//	                take the card out (as remove) right after it answers
//	                9000 to the next VERIFY with a PIN, before the next
//	                command reaches it; once
//	fault clear     no faults
//	fault           the faults set: "none", or e.g. "select-key=6A82
//	                remove-after-verify"
func (s *Server) controlLoop(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		line = strings.TrimSpace(line)
		s.Log.Printf("control: %s", line)
		fmt.Fprintln(c, s.control(line))
		c.Close()
	}
}

func (s *Server) control(line string) string {
	f := strings.Fields(line)
	if len(f) == 0 {
		return "error: empty command"
	}
	if f[0] == "fault" {
		return s.fault(f[1:])
	}
	arg := -1
	if len(f) == 2 {
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 0 {
			return "error: " + f[1] + " is not a count"
		}
		arg = n
	}
	switch {
	case f[0] == "remove" && len(f) == 1:
		s.mu.Lock()
		s.inserted = false
		s.mu.Unlock()
		s.remove("card removed")
		return "ok"
	case f[0] == "insert" && len(f) <= 2:
		if arg > 1 {
			return "error: the rig has readers 0 and 1"
		}
		s.mu.Lock()
		moved := arg >= 0 && arg != s.reader
		s.mu.Unlock()
		if moved {
			s.remove("card moved to another reader")
			s.mu.Lock()
			s.reader = arg
			s.mu.Unlock()
		}
		s.mu.Lock()
		s.inserted = true
		s.mu.Unlock()
		s.connect()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.conn == nil {
			return "ok waiting"
		}
		return "ok"
	case (f[0] == "delay" || f[0] == "signdelay") && arg >= 0:
		s.mu.Lock()
		defer s.mu.Unlock()
		if f[0] == "delay" {
			s.delay = time.Duration(arg) * time.Millisecond
		} else {
			s.signDelay = time.Duration(arg) * time.Millisecond
		}
		return "ok"
	case f[0] == "tries" && len(f) == 1:
		return strconv.Itoa(max(s.Card.TriesLeft(2), 0))
	case f[0] == "pubkey":
		ref := 1
		if arg >= 0 {
			ref = arg
		}
		k, err := s.Card.PublicKey(byte(ref))
		if err != nil {
			return "error: " + err.Error()
		}
		return k.Curve.Name + " " + hex.EncodeToString(k.Bytes())
	case f[0] == "status" && len(f) == 1:
		s.mu.Lock()
		defer s.mu.Unlock()
		in, conn := "removed", "waiting"
		if s.inserted {
			in = "inserted"
		}
		if s.conn != nil {
			conn = "connected"
		}
		return fmt.Sprintf("%s %s reader=%d tries=%d", in, conn, s.reader, max(s.Card.TriesLeft(2), 0))
	}
	return "error: unknown command " + strconv.Quote(line)
}

// fault answers the control command fault (its words after "fault").
func (s *Server) fault(f []string) string {
	switch {
	case len(f) == 2 && f[0] == "select-key":
		sw, err := strconv.ParseUint(f[1], 16, 16)
		if err != nil || len(f[1]) != 4 || sw>>8 < 0x61 || sw>>8 > 0x6F {
			return "error: " + strconv.Quote(f[1]) + " is not an error status word (61XX to 6FXX in hex)"
		}
		s.Card.SetSelectKeyFault(int(sw))
		return "ok"
	case len(f) == 1 && f[0] == "remove-after-verify":
		s.mu.Lock()
		s.removeAfterVerify = true
		s.mu.Unlock()
		return "ok"
	case len(f) == 1 && f[0] == "clear":
		s.Card.SetSelectKeyFault(0)
		s.mu.Lock()
		s.removeAfterVerify = false
		s.mu.Unlock()
		return "ok"
	case len(f) == 0:
		var set []string
		if sw := s.Card.SelectKeyFault(); sw != 0 {
			set = append(set, fmt.Sprintf("select-key=%04X", sw))
		}
		s.mu.Lock()
		if s.removeAfterVerify {
			set = append(set, "remove-after-verify")
		}
		s.mu.Unlock()
		if len(set) == 0 {
			return "none"
		}
		return strings.Join(set, " ")
	}
	return "error: unknown fault " + strconv.Quote(strings.Join(f, " ")) + " (select-key SW, remove-after-verify, clear)"
}
