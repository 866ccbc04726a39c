package main

import (
	"bufio"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/bench"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
)

// The figures of the daemon issue, measured on the real binary (this test
// binary run as signagent) and real SoftHSM:
//
//	go test -run '^$' -bench 'AgentRSS|AgentCPU' -benchtime 1x ./cmd/signagent
//
// BenchmarkAgentCPUPerSignature takes b.N as the number of signatures.

// BenchmarkAgentRSSInventedMethods compares the agent's resident memory
// after 10,000 unauthenticated requests with 10,000 distinct invented HTTP
// methods against a fresh agent after 10,000 ordinary requests (GET
// /healthz over the same TCP listener, with the bearer token).
func BenchmarkAgentRSSInventedMethods(b *testing.B) {
	const n = 10000
	for b.Loop() {
		ordinary := agentRSSAfter(b, n, func(i int) string {
			return "GET /healthz HTTP/1.1\r\nHost: agent\r\nAuthorization: Bearer 0123456789abcdef0123456789abcdef\r\n\r\n"
		})
		invented := agentRSSAfter(b, n, func(i int) string {
			return fmt.Sprintf("INVENTED%d /v1/signatures HTTP/1.1\r\nHost: agent\r\nContent-Length: 0\r\n\r\n", i)
		})
		b.ReportMetric(float64(ordinary)/(1<<20), "MB-ordinary")
		b.ReportMetric(float64(invented)/(1<<20), "MB-invented")
		b.ReportMetric(float64(invented)/float64(ordinary), "invented/ordinary")
	}
}

// agentRSSAfter starts an agent, sends n requests (request(i) on a new TCP
// connection each, as an unauthenticated flood would), and returns the
// agent's RSS after them.
func agentRSSAfter(b *testing.B, n int, request func(int) string) int64 {
	a, addr, _ := tcpAgent(b)
	defer a.cmd.Process.Signal(syscall.SIGTERM)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := rawRequest(addr, request(i)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	rss, err := bench.RSS(a.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return rss
}

// BenchmarkAgentCPUPerSignature compares the CPU time the agent process
// spends per /v1/signatures answer, 8 callers over its Unix socket, with
// the CPU time this process spends per raw token signature (C_Sign of a
// SHA-256 digest through the pkcs11 package) from 8 goroutines, on the
// same token in the same run.
func BenchmarkAgentCPUPerSignature(b *testing.B) {
	const conc = 8
	tk := pkcs11test.New(b)
	key, err := pkcs11.Open(context.Background(), tk.Selection(tk.RSA.Label), zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	digest := sha256.Sum256([]byte("figure"))
	before := selfCPU()
	parallel(b.N, conc, func() error {
		_, err := key.Sign(rand.Reader, digest[:], crypto.SHA256)
		return err
	})
	raw := selfCPU() - before
	key.Close()

	dir := shortDir(b)
	sock := filepath.Join(dir, "a.sock")
	a := startServe(b, signagent(b, serveEnv(tk), "--log-level", "warn", "serve", "--listen", "unix:"+sock,
		"--token-concurrency", strconv.Itoa(conc), "--audit-log", filepath.Join(dir, "audit.log")), sock)
	defer a.cmd.Process.Signal(syscall.SIGTERM)
	for range 50 { // warm the connections and the sessions
		a.sign()
	}
	before = procCPU(b, a.cmd.Process.Pid)
	parallel(b.N, conc, func() error {
		if st, body := a.sign(); st != 200 {
			return fmt.Errorf("%d %s", st, body)
		}
		return nil
	})
	agentCPU := procCPU(b, a.cmd.Process.Pid) - before
	b.ReportMetric(float64(raw.Microseconds())/float64(b.N), "raw-cpu-µs/sig")
	b.ReportMetric(float64(agentCPU.Microseconds())/float64(b.N), "agent-cpu-µs/sig")
	b.ReportMetric(float64(agentCPU)/float64(raw), "agent/raw")
}

// parallel runs op n times from conc goroutines.
func parallel(n, conc int, op func() error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := op(); err != nil {
					panic(err)
				}
			}
		}()
	}
	wg.Wait()
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is a process's user and system time from /proc/PID/stat.
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which is in parentheses): utime is
	// the 14th field of the line, stime the 15th, in clock ticks.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration((ut + st) * 1e9 / clockTicks)
}

// clockTicks is sysconf(_SC_CLK_TCK), 100 on Linux.
const clockTicks = 100

// rawRequest sends one request on a new TCP connection and reads the
// answer's status line.
func rawRequest(addr, req string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// BenchmarkTokenStartup compares `signagent oidc token` with a fresh access
// token in the store (no network: the provider is not even named) against
// the start-up of `signagent --version`, alternating, medians:
//
//	go test -run '^$' -bench TokenStartup -benchtime 200x ./cmd/signagent
func BenchmarkTokenStartup(b *testing.B) {
	dir := b.TempDir()
	store := filepath.Join(dir, "signagent")
	rec := `{"version":1,"profile":"default","authUrl":"https://idp.example","clientId":"crm-app","subject":"alice",` +
		`"scopes":["openid","Service.PublicAPI.Staging"],"accessToken":"` + strings.Repeat("ab", 32) + `","tokenType":"Bearer",` +
		`"expiresAt":"` + time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339) + `","signedInAt":"2026-01-01T00:00:00Z"}`
	if err := os.MkdirAll(store, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store, "default.json"), []byte(rec), 0o600); err != nil {
		b.Fatal(err)
	}
	env := []string{"XDG_STATE_HOME=" + dir}
	run := func(args ...string) time.Duration {
		cmd := signagent(b, env, args...)
		start := time.Now()
		if out, err := cmd.Output(); err != nil || len(out) == 0 {
			b.Fatalf("%v: %v %q", args, err, out)
		}
		return time.Since(start)
	}
	var tok, ver []time.Duration
	for b.Loop() {
		tok = append(tok, run("oidc", "token"))
		ver = append(ver, run("--version"))
	}
	mt, mv := medianOf(tok), medianOf(ver)
	b.ReportMetric(float64(mt.Microseconds()), "token-median-µs")
	b.ReportMetric(float64(mv.Microseconds()), "version-median-µs")
	b.ReportMetric(float64(mt)/float64(mv), "token/version")
}

func medianOf(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	slices.Sort(s)
	return s[len(s)/2]
}
