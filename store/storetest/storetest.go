// Package storetest starts real redis-server processes for tests: on a
// free loopback port, in a temporary directory, without persistence.
package storetest

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is a running redis-server.
type Server struct {
	Addr   string
	tls    *tls.Config // the rig's client configuration, when it speaks TLS alone
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process is gone (reaped)
	// restart starts the same server again (Restart).
	restart func() (*Server, error)
}

// Start runs redis-server with extra configuration lines (e.g.
// "requirepass secret") and stops it when the test ends. `make test`
// installs Debian's redis-server.
func Start(t testing.TB, config ...string) *Server {
	t.Helper()
	return start(t, false, config, nil)
}

// StartTLS runs redis-server speaking TLS alone (no plain port) with the
// given certificate and key; clients are not asked for certificates.
func StartTLS(t testing.TB, cert, key string) *Server {
	t.Helper()
	return start(t, true, []string{"tls-cert-file " + cert, "tls-key-file " + key, "tls-auth-clients no"}, nil)
}

// start starts redis-server (speaking TLS alone when tlsOnly; client is
// the rig's client configuration for it, or nil).
func start(t testing.TB, tlsOnly bool, config []string, client *tls.Config) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed: make test installs it (scripts/deps.sh redis-server)")
	}
	// The port was free a moment ago (freePort); another package's server
	// may take it first: then this one exits, and it starts again on
	// another.
	for attempt := 1; ; attempt++ {
		s, err := startOn(t, bin, freePort(t), t.TempDir(), tlsOnly, config)
		if err == nil {
			s.tls = client
			return s
		}
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			t.Fatal(err)
		}
	}
}

var errPortTaken = errors.New("the port was taken")

// startOn starts redis-server on port and waits until it says, in its own
// log, that it is ready (a PONG alone could come from another server that
// took the port).
func startOn(t testing.TB, bin, port, dir string, tlsOnly bool, config []string) (*Server, error) {
	addr := net.JoinHostPort("127.0.0.1", port)
	logFile := filepath.Join(dir, "redis.log")
	os.Remove(logFile) // a restart's: its readiness is read from a new log
	args := []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
		"--logfile", logFile}
	if tlsOnly {
		args[1] = "0"
		args = append(args, "--tls-port", port)
	}
	for _, c := range config {
		k, v, _ := strings.Cut(c, " ")
		args = append(args, "--"+k, v)
	}
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s := &Server{Addr: addr, cmd: cmd, exited: exited,
		restart: func() (*Server, error) { return startOn(t, bin, port, dir, tlsOnly, config) }}
	deadline := time.Now().Add(20 * time.Second)
	for {
		log, _ := os.ReadFile(logFile)
		select {
		case <-exited:
			log, _ = os.ReadFile(logFile) // all it wrote before it went
			if bytes.Contains(log, []byte("Address already in use")) {
				return nil, fmt.Errorf("redis-server on %s: %w", addr, errPortTaken)
			}
			return nil, fmt.Errorf("redis-server exited as it started on %s: %s", addr, lastLines(log))
		default:
		}
		if bytes.Contains(log, []byte("Ready to accept connections")) {
			t.Cleanup(s.Stop)
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server did not start on %s within 20 s: %s", addr, lastLines(log))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lastLines is the end of a log, for an error.
func lastLines(log []byte) string {
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	return strings.Join(lines[max(0, len(lines)-3):], " | ")
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Stop kills the server (a crash, as far as clients can tell).
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGCONT) // a paused one too
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// Restart starts the server again after Stop, on the same address, in the
// same directory, with the same configuration: what it kept (with
// "appendonly yes" among the configuration lines, every write it
// acknowledged) is there again. The port is asked back from the system:
// another process taking it meanwhile fails the test.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	select {
	case <-s.exited:
	default:
		t.Fatal("storetest: Restart of a server that is running; Stop it first")
	}
	var err error
	for range 50 { // the old socket may linger a moment
		var n *Server
		if n, err = s.restart(); err == nil {
			s.cmd, s.exited = n.cmd, n.exited
			return
		}
		if !errors.Is(err, errPortTaken) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal(err)
}

// Pause stops the server's process (SIGSTOP) until Resume: a store that
// does not answer.
func (s *Server) Pause() { s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume() { s.cmd.Process.Signal(syscall.SIGCONT) }

// NotRedis listens on a loopback port and answers whatever connects with
// an HTTP error page: "Redis that is not Redis".
func NotRedis(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprint(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// Dump is every key of the server with its string or hash value, as text:
// what someone reading Redis would see.
func Dump(t testing.TB, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	var out strings.Builder
	send := func(args ...string) string {
		fmt.Fprintf(c, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(c, "$%d\r\n%s\r\n", len(a), a)
		}
		return readReply(r)
	}
	keys := strings.Fields(send("KEYS", "*"))
	for _, k := range keys {
		fmt.Fprintf(&out, "%s %s\n", k, send("DUMP", k))
		if send("TYPE", k) == "hash" {
			fmt.Fprintf(&out, "  %s\n", send("HGETALL", k))
		} else {
			fmt.Fprintf(&out, "  %s\n", send("GET", k))
		}
	}
	return out.String()
}

// readReply reads one RESP reply as text (arrays joined by spaces).
func readReply(r *bufio.Reader) string {
	line, err := r.ReadString('\n')
	if err != nil || len(line) < 3 {
		return ""
	}
	line = strings.TrimRight(line, "\r\n")
	switch line[0] {
	case '+', '-', ':':
		return line[1:]
	case '$':
		var n int
		fmt.Sscan(line[1:], &n)
		if n < 0 {
			return ""
		}
		b := make([]byte, n+2)
		io.ReadFull(r, b)
		return string(b[:n])
	case '*':
		var n int
		fmt.Sscan(line[1:], &n)
		parts := make([]string, 0, n)
		for range n {
			parts = append(parts, readReply(r))
		}
		return strings.Join(parts, " ")
	}
	return line
}

// Sentinel is a master, a replica of it and three sentinels watching them
// as "mymaster" (quorum 2, a master down after 500 ms).
type Sentinel struct {
	Master, Replica *Server
	Sentinels       []*Server
	tls             bool
}

// URL is the redis+sentinel:// URL of the set (rediss+sentinel:// with
// TLS).
func (s *Sentinel) URL() string {
	addrs := make([]string, len(s.Sentinels))
	for i, x := range s.Sentinels {
		addrs[i] = x.Addr
	}
	scheme := "redis+sentinel://"
	if s.tls {
		scheme = "rediss+sentinel://"
	}
	return scheme + strings.Join(addrs, ",") + "/mymaster"
}

// StartSentinel starts the set and waits until the replica is in sync and
// every sentinel knows the master.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	return startSentinel(t, nil)
}

// StartSentinelTLS is StartSentinel speaking TLS alone, the sentinels
// included, with x's certificate: every node, and every sentinel, has no
// plain port; the replica and the sentinels reach the master over TLS.
func StartSentinelTLS(t testing.TB, x *TLS) *Sentinel {
	t.Helper()
	return startSentinel(t, x)
}

func startSentinel(t testing.TB, x *TLS) *Sentinel {
	t.Helper()
	server := func(config ...string) *Server {
		if x == nil {
			return Start(t, config...)
		}
		return start(t, true, append(x.config(), config...), x.client())
	}
	master := server()
	mhost, mport, _ := net.SplitHostPort(master.Addr)
	replica := server("replicaof " + mhost + " " + mport)
	waitFor(t, replica, []string{"INFO", "replication"}, "master_link_status:up")
	s := &Sentinel{Master: master, Replica: replica, tls: x != nil}
	bin, _ := exec.LookPath("redis-server")
	for range 3 {
		port := freePort(t)
		addr := net.JoinHostPort("127.0.0.1", port)
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		listen := "port " + port + "\n"
		if x != nil {
			listen = "port 0\ntls-port " + port + "\n"
			for _, c := range x.config() {
				listen += c + "\n"
			}
		}
		body := fmt.Sprintf("%sbind 127.0.0.1\ndir %s\nlogfile %s\nsentinel monitor mymaster %s %s 2\n"+
			"sentinel down-after-milliseconds mymaster 500\nsentinel failover-timeout mymaster 2000\nsentinel parallel-syncs mymaster 1\n",
			listen, dir, filepath.Join(dir, "sentinel.log"), mhost, mport)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, conf, "--sentinel")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		sx := &Server{Addr: addr, tls: x.client(), cmd: cmd, exited: exited}
		t.Cleanup(sx.Stop)
		s.Sentinels = append(s.Sentinels, sx)
	}
	for _, sx := range s.Sentinels {
		waitFor(t, sx, []string{"SENTINEL", "replicas", "mymaster"}, replica.Addr[strings.LastIndex(replica.Addr, ":")+1:])
	}
	return s
}

// waitFor sends cmd to s until the answer holds want (10 s at most).
func waitFor(t testing.TB, s *Server, cmd []string, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if strings.Contains(s.Command(cmd...), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v never answered %q", s.Addr, cmd, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Command sends one command to addr and returns its answer as text ("" on
// failure).
func Command(addr string, args ...string) string {
	return (&Server{Addr: addr}).Command(args...)
}

// Command sends one command to the server (over TLS when it speaks TLS
// alone) and returns its answer as text ("" on failure).
func (s *Server) Command(args ...string) string {
	var c net.Conn
	var err error
	if s.tls != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", s.Addr, s.tls)
	} else {
		c, err = net.DialTimeout("tcp", s.Addr, time.Second)
	}
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c, "$%d\r\n%s\r\n", len(a), a)
	}
	return readReply(bufio.NewReader(c))
}

// freePort is a loopback port free a moment ago, for a server started next.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// Cluster is a Redis Cluster of masters without replicas, every slot
// assigned and the cluster's state ok.
type Cluster struct {
	Masters []*Server
	tls     bool
}

// URL is the redis+cluster:// URL of the cluster (every master's address;
// rediss+cluster:// with TLS).
func (c *Cluster) URL() string {
	addrs := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		addrs[i] = m.Addr
	}
	if c.tls {
		return "rediss+cluster://" + strings.Join(addrs, ",")
	}
	return "redis+cluster://" + strings.Join(addrs, ",")
}

// StartCluster starts n redis-servers with cluster mode on (each with a
// cluster bus port of its own, free a moment ago: the default, port+10000,
// may be past 65535), makes them a cluster with redis-cli --cluster create
// (the slots shared out evenly, no replicas), and waits until every node
// says the cluster is ok.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return startCluster(t, n, nil)
}

// StartClusterTLS is StartCluster speaking TLS alone with x's
// certificate: clients and the cluster bus (tls-cluster), every node
// announcing its TLS port.
func StartClusterTLS(t testing.TB, n int, x *TLS) *Cluster {
	t.Helper()
	return startCluster(t, n, x)
}

func startCluster(t testing.TB, n int, x *TLS) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli is not installed: make test installs it with redis-server (scripts/deps.sh redis-server)")
	}
	c := &Cluster{tls: x != nil}
	args := []string{"--cluster", "create"}
	for range n {
		config := []string{"cluster-enabled yes", "cluster-port " + freePort(t), "cluster-node-timeout 2000"}
		var m *Server
		if x != nil {
			m = start(t, true, append(append(x.config(), "tls-cluster yes"), config...), x.client())
		} else {
			m = Start(t, config...)
		}
		c.Masters = append(c.Masters, m)
		args = append(args, m.Addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if x != nil {
		args = append(args, "--tls", "--cacert", x.CA)
	}
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, m := range c.Masters {
		waitFor(t, m, []string{"CLUSTER", "INFO"}, "cluster_state:ok")
	}
	return c
}

// Owner is the master that holds key's slot now.
func (c *Cluster) Owner(t testing.TB, key string) *Server {
	t.Helper()
	slot := c.Masters[0].Command("CLUSTER", "KEYSLOT", key)
	for _, m := range c.Masters {
		if ownsSlot(m.Command("CLUSTER", "NODES"), slot) {
			return m
		}
	}
	t.Fatalf("no master holds slot %s of %q", slot, key)
	return nil
}

// ownsSlot says whether the "myself" line of CLUSTER NODES lists slot.
func ownsSlot(nodes, slot string) bool {
	var n int
	fmt.Sscan(slot, &n)
	for line := range strings.SplitSeq(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "myself") {
			continue
		}
		for _, r := range f[8:] {
			var lo, hi int
			if k, _ := fmt.Sscanf(r, "%d-%d", &lo, &hi); k == 2 && lo <= n && n <= hi {
				return true
			} else if k == 1 && lo == n {
				return true
			}
		}
	}
	return false
}
