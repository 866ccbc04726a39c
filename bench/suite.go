package bench

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gosttoken"
	"github.com/signagent/signagent/signer"
)

// Options configures a benchmark run (`signagent-bench`).
type Options struct {
	// Token is the key to measure; ECKeyLabel names a second (P-256) key
	// whose raw rate is measured too.
	Token      pkcs11.Selection
	ECKeyLabel string
	// GOSTKey, when its URI is set, names a GOST key (on a module of its
	// own) whose raw and CMS rates are measured too, against each other.
	GOSTKey pkcs11.Selection
	// ServeArgs are the token-selection flags handed to the started agent
	// (the PIN reaches it through PINFile, never argv).
	ServeArgs []string
	PINFile   string
	// JSON prints the rows as JSON instead of the table.
	JSON bool
	// APIKey is written into the signed texts; the run's own emulator knows it.
	APIKey string

	Each        time.Duration // how long each row runs
	Concurrency []int         // callers of /v1/signatures
	Workers     int           // token workers: the agent's and the raw rate's
	TokenDelay  time.Duration // slow-card mode
	QueueSize   int           // the started agent's queue
	NoTools     bool          // skip openssl and pkcs11-tool

	// Socket drives an agent already serving instead of starting one;
	// AgentPID is its process, for memory figures.
	Socket   string
	AgentPID int
	// Executable is the signagent binary started as the agent.
	Executable string
	// Baseline, when set, is another signagent binary (an earlier build)
	// started the same way as a second agent on the same token: its
	// /v1/signatures is measured beside the agent's in Rounds interleaved
	// rounds per concurrency, with the CPU per call of both and the
	// ratios (not with Socket).
	Baseline string
	Rounds   int

	// Soak mode: SoakCallers drive /v1/signatures for Duration.
	Duration    time.Duration
	SoakCallers int

	Version        string
	Stdout, Stderr io.Writer
}

func (o *Options) say(format string, a ...any) { fmt.Fprintf(o.Stderr, "bench: "+format+"\n", a...) }

// delayed is the slow-card wrapper: it holds each signature for d.
type delayed struct {
	crypto.Signer
	d time.Duration
}

func (s delayed) Sign(r io.Reader, digest []byte, o crypto.SignerOpts) ([]byte, error) {
	time.Sleep(s.d)
	return s.Signer.Sign(r, digest, o)
}

func (o *Options) slow(k crypto.Signer) crypto.Signer {
	if o.TokenDelay > 0 {
		return delayed{k, o.TokenDelay}
	}
	return k
}

// Suite runs the whole table: the raw token, CMS in-process, the tools
// people use instead, and the agent over its socket. It stops early, with
// the agent it started, when ctx is done.
func Suite(ctx context.Context, o Options) error {
	o.Workers = max(o.Workers, 1)
	if o.Baseline != "" && o.Socket != "" {
		return errdefs.New(errdefs.ErrInvalidInput, "--baseline-agent starts a second agent beside the one this run starts; it does not apply with --socket")
	}
	key, err := pkcs11.Open(ctx, o.Token, zerolog.Nop())
	if err != nil {
		return err
	}
	cert, keyID, isGOST := key.Certificate(), key.ID(), key.IsGOST()
	if isGOST && o.TokenDelay > 0 {
		key.Close()
		return errdefs.New(errdefs.ErrInvalidInput, "--token-delay slows RSA and EC signatures; it does not apply to a GOST key, which hashes and signs on the token")
	}
	raw1, rawN, rows, err := o.rawRows(ctx, key)
	key.Close()
	if err != nil {
		return err
	}
	if isGOST && !o.NoTools {
		o.say("no openssl and pkcs11-tool rows: neither makes a CMS with a GOST key on a PKCS#11 token")
	}
	if !o.NoTools && o.TokenDelay == 0 && !isGOST {
		tools, err := o.toolRows(ctx, cert, keyID, raw1, rawN)
		if err != nil {
			o.say("skipping the openssl and pkcs11-tool rows: %v", err)
		}
		rows = append(rows, tools...)
	}
	sock, pid := o.Socket, o.AgentPID
	if sock == "" {
		a, err := StartAgent(ctx, &o, cert)
		if err != nil {
			return err
		}
		defer a.Stop()
		sock, pid = a.Socket, a.PID
		rows = append(rows, &Result{Name: "agent start-up to ready", Value: a.Startup.Round(time.Millisecond).String(), Note: "target < 100ms"})
	}
	var base *signTarget
	if o.Baseline != "" {
		bo := o
		bo.Executable = o.Baseline
		b, err := StartAgent(ctx, &bo, cert)
		if err != nil {
			return fmt.Errorf("the baseline agent %s: %w", o.Baseline, err)
		}
		defer b.Stop()
		rows = append(rows, &Result{Name: "baseline start-up to ready", Value: b.Startup.Round(time.Millisecond).String()})
		base = &signTarget{name: baselineSignName, op: signOp(agentclient.NewUnix(b.Socket)), pid: b.PID}
	}
	agent, ratios := o.agentRows(ctx, agentclient.NewUnix(sock), pid, base, raw1, rawN)
	rows = append(rows, agent...)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if o.JSON {
		header := map[string]any{"date": time.Now().UTC().Format("2006-01-02"), "cpus": runtime.NumCPU(),
			"goVersion": runtime.Version(), "version": o.Version, "tokenWorkers": o.Workers, "eachRow": o.Each.String(),
			"tokenDelay": o.TokenDelay.String()}
		if o.Baseline != "" {
			header["baseline"], header["rounds"], header["ratios"] = o.Baseline, max(o.Rounds, 1), ratios
		}
		return JSON(o.Stdout, header, rows, raw1)
	}
	fmt.Fprintf(o.Stdout, "signagent-bench: %s, %d CPU, Go %s, %s, token workers %d, %v a row",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.Version(), o.Version, o.Workers, o.Each)
	if o.TokenDelay > 0 {
		fmt.Fprintf(o.Stdout, ", slow card +%v a signature", o.TokenDelay)
	}
	if o.Baseline != "" {
		fmt.Fprintf(o.Stdout, ", agent rows in %d rounds\nbaseline /v1/signatures: the agent of %s, started the same way", max(o.Rounds, 1), o.Baseline)
	}
	fmt.Fprintln(o.Stdout)
	Table(o.Stdout, rows, raw1)
	printRatios(o.Stdout, ratios)
	return nil
}

// rawRows measures the token alone and CMS on it: the ceiling.
func (o *Options) rawRows(ctx context.Context, key *pkcs11.Key) (raw1, rawN *Result, rows []*Result, err error) {
	digest := sha256.Sum256([]byte("bench"))
	raw := func(s crypto.Signer) func(context.Context) string {
		return func(context.Context) string {
			if _, err := s.Sign(rand.Reader, digest[:], crypto.SHA256); err != nil {
				return "error"
			}
			return ""
		}
	}
	k := o.slow(key)
	kind := tokenKind(key)
	if key.IsGOST() {
		raw = func(crypto.Signer) func(context.Context) string { return o.gostRaw(key) }
	}
	o.say("raw token signatures (%s, %v a row)...", kind, o.Each)
	raw1 = RunContext(ctx, "raw token "+kind, 1, o.Each, raw(k))
	rawN = RunContext(ctx, "raw token "+kind, o.Workers, o.Each, raw(k))
	rows = append(rows, raw1, rawN)
	if o.ECKeyLabel != "" {
		sel := o.Token
		sel.KeyLabel, sel.KeyID, sel.URI, sel.CertFile = o.ECKeyLabel, nil, "", ""
		ec, err := pkcs11.Open(ctx, sel, zerolog.Nop())
		if err != nil {
			return nil, nil, nil, err
		}
		name := "raw token " + KeyKind(ec.Certificate())
		rows = append(rows, RunContext(ctx, name, 1, o.Each, raw(o.slow(ec))), RunContext(ctx, name, o.Workers, o.Each, raw(o.slow(ec))))
		ec.Close()
	}
	if o.GOSTKey.URI != "" {
		g, err := o.gostRows(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		rows = append(rows, g...)
	}
	cmsOp := o.cmsOp(&signer.CMS{Key: k, Cert: key.Certificate()})
	o.say("CMS signatures in-process...")
	cms1 := RunContext(ctx, "CMS in-process", 1, o.Each, cmsOp)
	cms1.Base = raw1
	cmsN := RunContext(ctx, "CMS in-process", o.Workers, o.Each, cmsOp)
	cmsN.Base = rawN
	return raw1, rawN, append(rows, cms1, cmsN), nil
}

// benchCredential is the credential of the texts signed in a run.
var benchCredential = canonical.Credential{Kind: canonical.Phone, Value: "9161234567"}

// cmsOp signs a fresh trusted text with cms.
func (o *Options) cmsOp(cms *signer.CMS) func(context.Context) string {
	return func(ctx context.Context) string {
		ts := canonical.Now()
		if _, err := cms.SignText(ctx, canonical.Text(o.APIKey, benchCredential, ts), ts); err != nil {
			return "error"
		}
		return ""
	}
}

// gostRaw is a GOST key's raw operation: one C_Sign with the token
// hashing, over a trusted text.
func (o *Options) gostRaw(key *pkcs11.Key) func(context.Context) string {
	return func(ctx context.Context) string {
		if _, err := key.SignMessageContext(ctx, canonical.Text(o.APIKey, benchCredential, canonical.Now()), nil); err != nil {
			return "error"
		}
		return ""
	}
}

// tokenKind names a key's kind for the rows, marking the GOST test module
// as software.
func tokenKind(key *pkcs11.Key) string {
	kind := KeyKind(key.Certificate())
	if strings.Contains(key.Token().Module().Path, gosttoken.Library) {
		kind += " (software test module)"
	}
	return kind
}

// gostRows measures the GOST key: its raw rate (one C_Sign with the token
// hashing, over a text the size of the trusted one) and CMS in-process on
// it, each against that raw rate.
func (o *Options) gostRows(ctx context.Context) ([]*Result, error) {
	g, err := pkcs11.Open(ctx, o.GOSTKey, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	defer g.Close()
	if !g.IsGOST() {
		return nil, errdefs.New(errdefs.ErrInvalidInput, "--gost-key names a "+KeyKind(g.Certificate())+" key, not a GOST one")
	}
	kind, raw, cmsOp := tokenKind(g), o.gostRaw(g), o.cmsOp(&signer.CMS{Key: g, Cert: g.Certificate()})
	o.say("GOST key: raw token and CMS signatures (%s)...", kind)
	raw1 := RunContext(ctx, "raw token "+kind, 1, o.Each, raw)
	rawN := RunContext(ctx, "raw token "+kind, o.Workers, o.Each, raw)
	raw1.Base, rawN.Base = raw1, raw1 // against the GOST key's own rate
	cms1 := RunContext(ctx, "CMS in-process, GOST", 1, o.Each, cmsOp)
	cms1.Base = raw1
	cmsN := RunContext(ctx, "CMS in-process, GOST", o.Workers, o.Each, cmsOp)
	cmsN.Base = rawN
	return []*Result{raw1, rawN, cms1, cmsN}, nil
}

// agentSignName is the row of the agent's /v1/signatures.
const agentSignName = "agent /v1/signatures"

// agentRows drives /v1/signatures at each concurrency (and, for an agent
// this run started, /v1/sessions cold and cached), with memory figures
// when the agent's process is known. With a baseline agent, its
// /v1/signatures is measured in the same rounds (interleaved) and the
// ratios compare the two.
func (o *Options) agentRows(ctx context.Context, client *agentclient.Client, pid int, base *signTarget, raw1, rawN *Result) ([]*Result, []Ratio) {
	var rows []*Result
	if pid > 0 {
		time.Sleep(200 * time.Millisecond)
		if rss, err := RSS(pid); err == nil {
			rows = append(rows, &Result{Name: "agent RSS idle", Value: MB(rss), Note: "target < 40 MB"})
		}
	}
	sign := signOp(client)
	var peak int64
	at, perCall := map[string]*Result{}, map[string]time.Duration{}
	for i, n := range o.Concurrency {
		o.say("/v1/signatures at concurrency %d...", n)
		var stopRSS chan struct{}
		var rssCh <-chan int64
		if pid > 0 && i == len(o.Concurrency)-1 {
			stopRSS = make(chan struct{})
			rssCh = MaxRSS(pid, stopRSS)
		}
		measured := []*Result{nil}
		if base == nil {
			measured[0] = RunContext(ctx, agentSignName, n, o.Each, sign)
		} else {
			var cpu map[string]time.Duration
			measured, cpu = o.interleaved(ctx, n, []signTarget{{agentSignName, sign, pid}, *base})
			maps.Copy(perCall, cpu)
		}
		for _, r := range measured {
			r.Base = raw1
			if n > 1 {
				r.Base = rawN
			}
			at[fmt.Sprintf("%s/%d", r.Name, n)] = r
		}
		rows = append(rows, measured...)
		if stopRSS != nil {
			close(stopRSS)
			peak = <-rssCh
		}
	}
	if peak > 0 {
		rows = append(rows, &Result{Name: fmt.Sprintf("agent RSS at concurrency %d", o.Concurrency[len(o.Concurrency)-1]), Value: MB(peak), Note: "target < 80 MB"})
	}
	ratios := signRatios(at, perCall, o.Concurrency)
	if o.Socket != "" {
		return rows, ratios
	}
	o.say("/v1/sessions, cold and cached...")
	req := agentapi.SessionRequest{Credential: agentapi.Credential{Phone: "9161234567"}, ServiceUserID: "bench-user-0"}
	var n atomic.Int64
	r := RunContext(ctx, "agent /v1/sessions cold", 1, o.Each, func(ctx context.Context) string {
		cold := req
		cold.Refresh, cold.ServiceUserID = true, fmt.Sprintf("bench-user-%d", n.Add(1)%benchUsers)
		_, err := client.Session(ctx, cold)
		return errKind(err)
	})
	r.Base, r.Note = raw1, "full flow: sign + 2 calls"
	rows = append(rows, r)
	r = RunContext(ctx, "agent /v1/sessions cached", 1, o.Each, func(ctx context.Context) string { _, err := client.Session(ctx, req); return errKind(err) })
	r.Base, r.Note = raw1, "target p50 < 200µs"
	return append(rows, r), ratios
}

func signOp(client *agentclient.Client) func(context.Context) string {
	return func(ctx context.Context) string {
		_, err := client.Sign(ctx, agentapi.SignatureRequest{Credential: agentapi.Credential{Phone: "9161234567"}})
		return errKind(err)
	}
}

// KeyKind names a certificate's key: RSA-2048, ECDSA P-256, ...
func KeyKind(c *x509.Certificate) string {
	switch kind, bits, curve := pkcs11.KeyShape(c); kind {
	case "RSA":
		return fmt.Sprintf("RSA-%d", bits)
	case "EC":
		return "ECDSA " + curve
	case "GOST":
		return fmt.Sprintf("GOST R 34.10-2012 %d %s", bits, curve)
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

// ParseConcurrency reads a comma-separated list of caller counts: 1,2,8,32.
func ParseConcurrency(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--concurrency %q: want numbers like 1,2,8,32", s)
		}
		out = append(out, n)
	}
	return out, nil
}
