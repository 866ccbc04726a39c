package main

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/api"
	"github.com/signagent/signagent/bench"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/signer"
)

func benchCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure the token, CMS signing and the agent over its socket, in one run, with ratios against the raw token rate",
		Description: "Without --socket it starts its own emulator and `signagent serve` on a temporary socket, and also\n" +
			"reports the agent's start-up time and resident memory. With --socket it drives an agent already running.\n" +
			"It also times what people use instead: one `openssl cms -sign` (PKCS#11 engine) and one `pkcs11-tool --sign`\n" +
			"process per signature. --soak drives /v1/signatures for --duration and reports the agent's memory and\n" +
			"goroutines at the start and the end.",
		Flags: concat(tokenFlags(), []cli.Flag{
			&cli.DurationFlag{Name: "each", Value: 3 * time.Second, Usage: "how long each row runs"},
			&cli.BoolFlag{Name: "soak", Usage: "soak mode: drive /v1/signatures for --duration at --soak-concurrency"},
			&cli.DurationFlag{Name: "duration", Value: 10 * time.Minute, Usage: "soak mode: how long"},
			&cli.IntFlag{Name: "soak-concurrency", Value: 8, Usage: "soak mode: callers"},
			&cli.BoolFlag{Name: "no-tools", Usage: "skip the openssl and pkcs11-tool rows"},
			&cli.StringFlag{Name: "concurrency", Value: "1,2,8,32", Usage: "comma-separated caller concurrencies for /v1/signatures"},
			&cli.IntFlag{Name: "workers", Value: runtime.GOMAXPROCS(0), Usage: "token workers: the agent's --token-concurrency and the raw rate's N"},
			&cli.StringFlag{Name: "ec-key-label", Usage: "also measure this P-256 key's raw rate"},
			&cli.DurationFlag{Name: "token-delay", Usage: "slow-card mode: add this to every token signature (raw and agent alike)"},
			&cli.IntFlag{Name: "queue-size", Value: 1024, Usage: "the started agent's --queue-size"},
			&cli.StringFlag{Name: "socket", Usage: "drive the agent already serving on this Unix `SOCKET` instead of starting one"},
			&cli.IntFlag{Name: "agent-pid", Usage: "with --socket: the agent's `PID`, to report its resident memory"},
		}),
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			return runBench(c, e)
		},
	}
}

func parseConcurrency(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, usageErr(fmt.Errorf("--concurrency %q: want numbers like 1,2,8,32", s))
		}
		out = append(out, n)
	}
	return out, nil
}

// delayed is the slow-card wrapper: it holds each signature for d.
type delayed struct {
	crypto.Signer
	d time.Duration
}

func (s delayed) Sign(r io.Reader, digest []byte, o crypto.SignerOpts) ([]byte, error) {
	time.Sleep(s.d)
	return s.Signer.Sign(r, digest, o)
}

func runBench(c *cli.Context, e *env) error {
	conc, err := parseConcurrency(c.String("concurrency"))
	if err != nil {
		return err
	}
	d, workers, delay := c.Duration("each"), max(c.Int("workers"), 1), c.Duration("token-delay")
	if c.Bool("soak") {
		return runSoak(c, e, workers, delay)
	}
	sel, err := selection(c)
	if err != nil {
		return err
	}
	say := func(format string, a ...any) { fmt.Fprintf(e.stderr, "bench: "+format+"\n", a...) }
	var rows []*bench.Result

	// 1. The token alone, and CMS on it: the ceiling.
	key, err := pkcs11.Open(context.Background(), sel, zerolog.Nop())
	if err != nil {
		return err
	}
	cert := key.Certificate()
	var signerKey crypto.Signer = key
	if delay > 0 {
		signerKey = delayed{key, delay}
	}
	digest := sha256.Sum256([]byte("bench"))
	raw := func(s crypto.Signer) func(context.Context) string {
		return func(context.Context) string {
			if _, err := s.Sign(rand.Reader, digest[:], crypto.SHA256); err != nil {
				return "error"
			}
			return ""
		}
	}
	say("raw token signatures (%s, %v a row)...", keyKind(cert), d)
	raw1 := bench.Run("raw token "+keyKind(cert), 1, d, raw(signerKey))
	rawN := bench.Run("raw token "+keyKind(cert), workers, d, raw(signerKey))
	rows = append(rows, raw1, rawN)
	if label := c.String("ec-key-label"); label != "" {
		ecSel := sel
		ecSel.KeyLabel, ecSel.KeyID, ecSel.URI, ecSel.CertFile = label, nil, "", ""
		ec, err := pkcs11.Open(context.Background(), ecSel, zerolog.Nop())
		if err != nil {
			key.Close()
			return err
		}
		var ecKey crypto.Signer = ec
		if delay > 0 {
			ecKey = delayed{ec, delay}
		}
		rows = append(rows, bench.Run("raw token "+keyKind(ec.Certificate()), 1, d, raw(ecKey)),
			bench.Run("raw token "+keyKind(ec.Certificate()), workers, d, raw(ecKey)))
		ec.Close()
	}
	apiKey := benchAPIKey(c)
	cms := &signer.CMS{Key: signerKey, Cert: cert}
	cred := canonical.Credential{Kind: canonical.Phone, Value: "9161234567"}
	cmsOp := func(ctx context.Context) string {
		ts := canonical.Now()
		if _, err := cms.SignText(ctx, canonical.Text(apiKey, cred, ts), ts); err != nil {
			return "error"
		}
		return ""
	}
	say("CMS signatures in-process...")
	cms1 := bench.Run("CMS in-process", 1, d, cmsOp)
	cms1.Base = raw1
	cmsN := bench.Run("CMS in-process", workers, d, cmsOp)
	cmsN.Base = rawN
	rows = append(rows, cms1, cmsN)
	keyID := key.ID()
	key.Close()

	// What people use instead: a process per signature.
	if !c.Bool("no-tools") && delay == 0 {
		tools, err := toolRows(c, e, sel, cert, keyID, apiKey, d, workers, raw1, rawN)
		if err != nil {
			say("skipping the openssl and pkcs11-tool rows: %v", err)
		}
		rows = append(rows, tools...)
	}

	// 2. The agent over its socket.
	sock, pid := c.String("socket"), c.Int("agent-pid")
	if sock == "" {
		stop, s, p, startup, err := startAgent(c, e, cert, apiKey, workers, delay)
		if err != nil {
			return err
		}
		defer stop()
		sock, pid = s, p
		rows = append(rows, &bench.Result{Name: "agent start-up to ready", Value: startup.Round(time.Millisecond).String(), Note: "target < 100ms"})
	}
	client := agentclient.NewUnix(sock)
	if pid > 0 {
		time.Sleep(200 * time.Millisecond)
		if rss, err := bench.RSS(pid); err == nil {
			rows = append(rows, &bench.Result{Name: "agent RSS idle", Value: bench.MB(rss), Note: "target < 40 MB"})
		}
	}
	sign := func(ctx context.Context) string {
		_, err := client.Sign(ctx, api.SignatureRequest{Credential: api.Credential{Phone: "9161234567"}})
		return errKind(err)
	}
	var peak int64
	for i, n := range conc {
		say("/v1/signatures at concurrency %d...", n)
		var stopRSS chan struct{}
		var rssCh <-chan int64
		if pid > 0 && i == len(conc)-1 {
			stopRSS = make(chan struct{})
			rssCh = bench.MaxRSS(pid, stopRSS)
		}
		r := bench.Run("agent /v1/signatures", n, d, sign)
		r.Base = raw1
		if n > 1 {
			r.Base = rawN
		}
		rows = append(rows, r)
		if stopRSS != nil {
			close(stopRSS)
			peak = <-rssCh
		}
	}
	if peak > 0 {
		rows = append(rows, &bench.Result{Name: fmt.Sprintf("agent RSS at concurrency %d", conc[len(conc)-1]), Value: bench.MB(peak), Note: "target < 80 MB"})
	}
	if c.String("socket") == "" {
		say("/v1/sessions, cold and cached...")
		req := api.SessionRequest{Credential: api.Credential{Phone: "9161234567"}, ServiceUserID: "bench-user"}
		cold := req
		cold.Refresh = true
		r := bench.Run("agent /v1/sessions cold", 1, d, func(ctx context.Context) string { _, err := client.Session(ctx, cold); return errKind(err) })
		r.Base, r.Note = raw1, "full flow: sign + 2 calls"
		rows = append(rows, r)
		r = bench.Run("agent /v1/sessions cached", 1, d, func(ctx context.Context) string { _, err := client.Session(ctx, req); return errKind(err) })
		r.Base, r.Note = raw1, "target p50 < 200µs"
		rows = append(rows, r)
	}
	fmt.Fprintf(e.stdout, "signagent bench: %s, %d CPU, Go %s, %s, token workers %d, %v a row",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.Version(), version, workers, d)
	if delay > 0 {
		fmt.Fprintf(e.stdout, ", slow card +%v a signature", delay)
	}
	fmt.Fprintln(e.stdout)
	bench.Table(e.stdout, rows, raw1)
	return nil
}

// keyKind names a certificate's key: RSA-2048, ECDSA P-256, ...
func keyKind(c *x509.Certificate) string {
	switch kind, bits, curve := pkcs11.KeyShape(c); kind {
	case "RSA":
		return fmt.Sprintf("RSA-%d", bits)
	case "EC":
		return "ECDSA " + curve
	default:
		return kind
	}
}

func errKind(err error) string {
	var ae *agentclient.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ae):
		return strconv.Itoa(ae.Status)
	}
	return "transport"
}

// benchAPIKey is the configured API key, or a throw-away one: the bench
// talks to its own emulator.
func benchAPIKey(c *cli.Context) string {
	if k, err := apiKey(c); err == nil {
		return k
	}
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// startAgent starts the emulator in-process and `signagent serve` as a child
// on a temporary socket, and waits until the agent is ready.
func startAgent(c *cli.Context, e *env, cert *x509.Certificate, apiKey string, workers int, delay time.Duration) (stop func(), sock string, pid int, startup time.Duration, err error) {
	dir, err := os.MkdirTemp("", "signagent-bench")
	if err != nil {
		return nil, "", 0, 0, err
	}
	cleanup := []func(){func() { os.RemoveAll(dir) }}
	stop = func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}
	emu, err := emulator.New(&emulator.Config{
		Partners: []emulator.Partner{{Name: "bench", APIKey: apiKey, Certificates: []string{string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))}}},
		Users:    []emulator.User{{ID: "bench", Phone: "9161234567", Linked: []string{"bench:bench-user"}}},
	}, zerolog.Nop())
	if err == nil {
		err = emu.Start()
	}
	if err != nil {
		stop()
		return nil, "", 0, 0, err
	}
	cleanup = append(cleanup, func() { emu.Close(context.Background()) })

	exe, err := os.Executable()
	if err != nil {
		stop()
		return nil, "", 0, 0, err
	}
	sock = filepath.Join(dir, "agent.sock")
	args := []string{"--log-level", "warn", "serve", "--listen", "unix:" + sock, "--base-url", emu.URL(),
		"--token-concurrency", strconv.Itoa(workers), "--queue-size", strconv.Itoa(c.Int("queue-size")),
		"--audit-log", filepath.Join(dir, "audit.log"), "--token-delay", delay.String()}
	for _, f := range []string{"module", "token-label", "token-serial", "key", "key-label", "key-id", "cert"} {
		if v := c.String(f); v != "" && c.IsSet(f) {
			args = append(args, "--"+f, v)
		}
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "SIGNAGENT_API_KEY="+apiKey) // the environment, not argv
	if f := c.String("pin-file"); f != "" {
		cmd.Env = append(cmd.Env, "SIGNAGENT_PIN_FILE="+f)
	}
	cmd.Stderr = e.stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		stop()
		return nil, "", 0, 0, err
	}
	cleanup = append(cleanup, func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	client := agentclient.NewUnix(sock)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := client.Ready(ctx)
		cancel()
		if err == nil {
			startup = time.Since(t0)
			break
		}
		if time.Since(t0) > 15*time.Second {
			stop()
			return nil, "", 0, 0, fmt.Errorf("the agent was not ready after 15s: %w", err)
		}
		time.Sleep(time.Millisecond)
	}
	return stop, sock, cmd.Process.Pid, startup, nil
}
