package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/secret"
)

// ProxyOptions configures `signagent-bench proxy`.
type ProxyOptions struct {
	Executable  string        // the signagent binary started as the agent
	Helper      string        // the signagent-bench binary started as the business API and the Go floor
	Baseline    string        // another signagent binary measured beside it as "baseline tcp" ("": none)
	Each        time.Duration // each row's time, spread over Rounds
	Rounds      int           // interleaved rounds per row
	Concurrency []int
	JSON        bool
	Version     string
	Stdout      io.Writer
	Stderr      io.Writer
}

// Proxy measures the agent's authorizing proxy against its peer, nginx
// configured as the header-injecting proxy an operator would write, in one
// run over one minimal upstream: the direct call, nginx, the agent's proxy
// over TCP with its bearer and over its Unix socket (an OpenID Connect
// profile's header cached), a cached POST /v1/authorizations and GET
// /readyz; each row's time is spread over interleaved rounds so that the
// machine's drift falls on every row alike. It prints the rows and the
// ratios: proxy / nginx, proxy / direct, proxy / (direct + hop),
// authorizations / readyz, and against the Go floor (FloorProxy: Go's
// HTTP server with no agent work): floor / nginx, proxy / floor. Without
// nginx its rows are skipped, said so. With o.Baseline, that binary's
// agent, started the same way, is measured in the same rounds as
// "baseline tcp" (before the agent every other round), with its CPU per
// call, and compared with the agent (proxy / baseline), nginx and the
// floor: before and after a change in one run.
func Proxy(ctx context.Context, o ProxyOptions) error {
	say := func(format string, a ...any) { fmt.Fprintf(o.Stderr, "bench: "+format+"\n", a...) }
	dir, err := os.MkdirTemp("", "signagent-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// The business API runs in a process of its own, as a real one does:
	// in the benchmark's process, the direct call would be handed from
	// the caller's goroutine to the server's without a process waking,
	// which no path through a proxy can match, and the direct row would
	// no longer be the baseline the ratios need.
	upAddr, up, err := startHelper(ctx, o, "business API", "upstream")
	if err != nil {
		return err
	}
	defer stopHelper(up)
	upURL := "http://" + upAddr

	// The agent serves one OpenID Connect profile whose access token lives
	// a day (proxySetup.start), so that the benchmark needs no identity
	// provider (nothing is refreshed); the baseline agent, when asked for,
	// is another binary started the same way.
	bearer, token := randomHex(16), randomHex(32)
	for name, v := range map[string]string{"bearer": bearer, "client-secret": "bench-client-secret-0123456789"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			return err
		}
	}
	setup := proxySetup{dir: dir, upURL: upURL, token: token, stderr: o.Stderr}
	agent, err := setup.start(ctx, "agent", o.Executable)
	if err != nil {
		return fmt.Errorf("the agent %s: %w", o.Executable, err)
	}
	defer agent.stop()
	var baseline *proxyAgent
	if o.Baseline != "" {
		if baseline, err = setup.start(ctx, "baseline", o.Baseline); err != nil {
			return fmt.Errorf("the baseline agent %s: %w", o.Baseline, err)
		}
		defer baseline.stop()
	}
	// The Go floor: the least a proxy on Go's HTTP server does for the
	// same call (FloorProxy), in a process of its own as the agent is.
	floorAddr, floor, err := startHelper(ctx, o, "Go floor", "floor", "--upstream", upAddr, "--bearer-token-file", filepath.Join(dir, "bearer"))
	if err != nil {
		return err
	}
	defer stopHelper(floor)

	tcp := &http.Transport{MaxIdleConnsPerHost: 64}
	unix := &http.Transport{MaxIdleConnsPerHost: 64, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", agent.sock)
	}}
	call := func(tr http.RoundTripper, method, url, body string, hdr ...string) func(context.Context) string {
		return func(ctx context.Context) string {
			req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				return "error"
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Sprint(resp.StatusCode)
			}
			return ""
		}
	}
	method := "/GetMyOrganizations?autoRegister=false"
	viaTCP := func(a *proxyAgent) func(context.Context) string {
		return call(tcp, "GET", "http://"+a.addr+"/v1/service"+method, "", "Authorization", "Bearer "+bearer, "Signagent-Identity", "oidc profile=bench")
	}
	type path struct {
		name string
		op   func(context.Context) string
	}
	paths := []path{
		{"direct", call(tcp, "GET", upURL+method, "", "Authorization", "Bearer "+token)},
		{"go floor", call(tcp, "GET", "http://"+floorAddr+method, "", "Authorization", "Bearer "+bearer)},
		{"proxy tcp", viaTCP(agent)},
		{"proxy unix", call(unix, "GET", "http://agent/v1/service"+method, "", "Signagent-Identity", "oidc profile=bench")},
		{"authorizations", call(unix, "POST", "http://agent/v1/authorizations", `{"scheme":"oidc","profile":"bench"}`)},
		{"readyz", call(unix, "GET", "http://agent/readyz", "")},
	}
	if baseline != nil {
		i := slices.IndexFunc(paths, func(p path) bool { return p.name == "proxy tcp" })
		paths = slices.Insert(paths, i+1, path{"baseline tcp", viaTCP(baseline)})
	}
	nginx, why, stop, nginxPID := StartNginx(upAddr, bearer)
	defer stop()
	if nginx != "" {
		paths = slices.Insert(paths, 1, path{"nginx", call(tcp, "GET", nginx+method, "", "Authorization", "Bearer "+bearer)})
	} else {
		say("nginx rows skipped: %s", why)
	}
	for _, p := range paths {
		if kind := p.op(ctx); kind != "" {
			return fmt.Errorf("%s answered %s before the run", p.name, kind)
		}
	}
	// CPU per call: the process time the serving process (nginx: its
	// master and workers) spent during a row, divided by the row's calls.
	cpuOf := map[string]func() time.Duration{
		"proxy tcp": func() time.Duration { return processCPU(agent.cmd.Process.Pid) },
		"go floor":  func() time.Duration { return processCPU(floor.Process.Pid) },
	}
	if baseline != nil {
		cpuOf["baseline tcp"] = func() time.Duration { return processCPU(baseline.cmd.Process.Pid) }
	}
	if nginxPID > 0 {
		cpuOf["nginx"] = func() time.Duration { return processCPU(nginxPID) }
	}
	rounds := max(o.Rounds, 1)
	var rows []*Result
	at := map[string]*Result{}
	cpuPerCall := map[string]time.Duration{}
	for _, conc := range o.Concurrency {
		say("concurrency %d: %d rows, %v each in %d rounds...", conc, len(paths), o.Each, rounds)
		merged := make([]*Result, len(paths))
		spent := make([]time.Duration, len(paths))
		for round := range rounds {
			for k := range paths {
				i, p := k, paths[k]
				if round%2 == 1 && baseline != nil && (p.name == "proxy tcp" || p.name == "baseline tcp") {
					// The baseline, inserted right after the agent, goes
					// first every other round: neither always runs right
					// after the other's burst.
					i = slices.IndexFunc(paths, func(q path) bool { return q.name != p.name && (q.name == "proxy tcp" || q.name == "baseline tcp") })
					p = paths[i]
				}
				var before time.Duration
				if f := cpuOf[p.name]; f != nil {
					before = f()
				}
				merged[i] = merge(merged[i], RunContext(ctx, p.name, conc, o.Each/time.Duration(rounds), p.op))
				if f := cpuOf[p.name]; f != nil {
					spent[i] += f() - before
				}
			}
		}
		for i, p := range paths {
			rows = append(rows, merged[i])
			at[fmt.Sprintf("%s/%d", p.name, conc)] = merged[i]
			if cpuOf[p.name] != nil {
				if per := cpuNote(merged[i], spent[i]); per > 0 {
					cpuPerCall[fmt.Sprintf("%s/%d", p.name, conc)] = per
				}
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	ratios := append(proxyRatios(at, o.Concurrency), cpuRatios(cpuPerCall, o.Concurrency)...)
	if o.JSON {
		header := map[string]any{"date": time.Now().Format(time.DateOnly), "version": o.Version, "ratios": ratios}
		if o.Baseline != "" {
			header["baseline"] = o.Baseline
		}
		return JSON(o.Stdout, header, rows, nil)
	}
	fmt.Fprintf(o.Stdout, "signagent-bench proxy: %s, %s, %v a row in %d rounds\n", time.Now().Format(time.DateOnly), o.Version, o.Each, rounds)
	if o.Baseline != "" {
		fmt.Fprintf(o.Stdout, "baseline tcp: the agent of %s, started the same way\n", o.Baseline)
	}
	Table(o.Stdout, rows, nil)
	printRatios(o.Stdout, ratios)
	return nil
}

// cpuNote puts row's CPU per call (spent over its calls) in its note and
// returns it: zero when the row made no call, or when /proc counted none
// of its CPU (in clock ticks: under one tick is not none, the note says
// so, and no ratio is made with it).
func cpuNote(row *Result, spent time.Duration) time.Duration {
	if row.Ops == 0 {
		return 0
	}
	if spent == 0 {
		bound := float64((cpuTick / time.Duration(row.Ops)).Nanoseconds()) / 1000
		row.Note = fmt.Sprintf("CPU <%.1fµs/call (under one %v clock tick)", bound, cpuTick)
		return 0
	}
	per := spent / time.Duration(row.Ops)
	row.Note = fmt.Sprintf("CPU %.1fµs/call", float64(per.Nanoseconds())/1000)
	return per
}

// printRatios writes ratios below a table, one a line.
func printRatios(w io.Writer, ratios []Ratio) {
	for _, r := range ratios {
		fmt.Fprintf(w, "%-44s %6.2f\n", r.Name, r.Value)
	}
}

// Ratio is one comparison of bench proxy.
type Ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// proxyRatios are the comparisons the issue sets goals for, where both
// rows were measured.
func proxyRatios(at map[string]*Result, conc []int) []Ratio {
	var out []Ratio
	add := func(name string, a, b time.Duration) {
		if a > 0 && b > 0 {
			out = append(out, Ratio{name, float64(a) / float64(b)})
		}
	}
	p := func(name string, c int, q float64) time.Duration {
		if r := at[fmt.Sprintf("%s/%d", name, c)]; r != nil {
			return r.Percentile(q)
		}
		return 0
	}
	for _, c := range conc {
		add(fmt.Sprintf("proxy tcp / nginx, p50 at %d", c), p("proxy tcp", c, 50), p("nginx", c, 50))
		add(fmt.Sprintf("proxy tcp / nginx, p99 at %d", c), p("proxy tcp", c, 99), p("nginx", c, 99))
		add(fmt.Sprintf("go floor / nginx, p50 at %d", c), p("go floor", c, 50), p("nginx", c, 50))
		add(fmt.Sprintf("go floor / nginx, p99 at %d", c), p("go floor", c, 99), p("nginx", c, 99))
		add(fmt.Sprintf("proxy tcp / go floor, p50 at %d", c), p("proxy tcp", c, 50), p("go floor", c, 50))
		add(fmt.Sprintf("proxy tcp / baseline tcp, p50 at %d", c), p("proxy tcp", c, 50), p("baseline tcp", c, 50))
		add(fmt.Sprintf("proxy tcp / baseline tcp, p99 at %d", c), p("proxy tcp", c, 99), p("baseline tcp", c, 99))
		add(fmt.Sprintf("baseline tcp / nginx, p50 at %d", c), p("baseline tcp", c, 50), p("nginx", c, 50))
		add(fmt.Sprintf("baseline tcp / nginx, p99 at %d", c), p("baseline tcp", c, 99), p("nginx", c, 99))
		add(fmt.Sprintf("baseline tcp / go floor, p50 at %d", c), p("baseline tcp", c, 50), p("go floor", c, 50))
		add(fmt.Sprintf("proxy unix / direct, p50 at %d", c), p("proxy unix", c, 50), p("direct", c, 50))
		add(fmt.Sprintf("proxy unix / (direct + hop), p50 at %d", c), p("proxy unix", c, 50), p("direct", c, 50)+p("readyz", c, 50))
		add(fmt.Sprintf("authorizations / readyz, p50 at %d", c), p("authorizations", c, 50), p("readyz", c, 50))
	}
	return out
}

// cpuRatios are the comparisons of CPU per call (by "row/concurrency"),
// where both rows were measured.
func cpuRatios(perCall map[string]time.Duration, conc []int) []Ratio {
	var out []Ratio
	for _, c := range conc {
		for _, pair := range [][2]string{{"proxy tcp", "nginx"}, {"go floor", "nginx"}, {"proxy tcp", "go floor"},
			{"proxy tcp", "baseline tcp"}, {"baseline tcp", "nginx"}, {"baseline tcp", "go floor"}} {
			a, n := perCall[fmt.Sprintf("%s/%d", pair[0], c)], perCall[fmt.Sprintf("%s/%d", pair[1], c)]
			if a > 0 && n > 0 {
				out = append(out, Ratio{Name: fmt.Sprintf("CPU per call, %s / %s (c%d)", pair[0], pair[1], c), Value: float64(a) / float64(n)})
			}
		}
	}
	return out
}

// merge adds b's operations to a (nil: b).
func merge(a, b *Result) *Result {
	if a == nil {
		return b
	}
	a.Ops += b.Ops
	a.Elapsed += b.Elapsed
	a.lat = append(a.lat, b.lat...)
	slices.Sort(a.lat)
	for k, v := range b.Errors {
		a.Errors[k] += v
	}
	return a
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// upstreamAnswer is what the benchmark's business API answers.
var upstreamAnswer = []byte(`{"Organizations":[{"OrgId":"org-1","FullName":"Horns and Hooves LLC"}]}`)

// UpstreamHandler is the benchmark's minimal business API: a request with
// an Authorization header gets upstreamAnswer, one without gets 401.
var UpstreamHandler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") == "" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(upstreamAnswer)
})

// ServeUpstream serves UpstreamHandler on addr (a loopback address) until
// ctx ends.
func ServeUpstream(ctx context.Context, addr string) error {
	if !loopback(addr) {
		return fmt.Errorf("%w: the benchmark's business API listens on a loopback address only, not %q", errdefs.ErrInvalidInput, addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: UpstreamHandler}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// loopback says whether addr is a loopback host:port.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}

// waitListening waits up to 10 seconds for addr to accept a connection.
func waitListening(ctx context.Context, addr string) error {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s after 10s", addr)
		}
	}
}

// freePort is a loopback address free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartNginx starts Debian's nginx on loopback, unprivileged (as nobody
// when run as root), as the proxy an operator would write in front of
// upstream: callers with bearer get upstream's answer with a fixed
// Authorization header, over an upstream keepalive pool, with a buffered
// access log; two workers. It returns nginx's address and how to stop
// it (which removes its files), or "" and why it could not start.
func StartNginx(upstream, bearer string) (url, why string, stop func(), pid int) {
	stop = func() {}
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			return "", "nginx is not installed (apt-get install nginx; make gobench installs it)", stop, 0
		}
		bin = "/usr/sbin/nginx"
	}
	// As root, nginx runs as nobody, who must reach its directory: /tmp,
	// not a temporary directory that may sit under one only root enters.
	parent := ""
	if os.Getuid() == 0 {
		parent = "/tmp"
	}
	ndir, err := os.MkdirTemp(parent, "signagent-nginx")
	if err != nil {
		return "", err.Error(), stop, 0
	}
	os.Chmod(ndir, 0o777) // the unprivileged nginx writes its log and pid here
	stop = func() { os.RemoveAll(ndir) }
	addr, err := freePort()
	if err != nil {
		return "", err.Error(), stop, 0
	}
	conf := fmt.Sprintf(`worker_processes 2;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
daemon off;
events { worker_connections 1024; }
http {
  access_log %[1]s/access.log combined buffer=64k flush=1s;
  client_body_temp_path %[1]s/body; proxy_temp_path %[1]s/proxy; fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi; scgi_temp_path %[1]s/scgi;
  upstream business { server %[2]s; keepalive 32; }
  server {
    listen %[3]s;
    location / {
      if ($http_authorization != "Bearer %[4]s") { return 401; }
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "Bearer upstream";
      proxy_pass http://business;
    }
  }
}
`, ndir, upstream, addr, bearer)
	file := filepath.Join(ndir, "nginx.conf")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		return "", err.Error(), stop, 0
	}
	cmd := exec.Command(bin, "-p", ndir, "-c", file, "-e", filepath.Join(ndir, "error.log"))
	cmd.Env = secret.ChildEnv(os.Environ())
	if os.Getuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", "nginx did not start: " + err.Error(), stop, 0
	}
	stop = func() { cmd.Process.Signal(syscall.SIGQUIT); cmd.Wait(); os.RemoveAll(ndir) }
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr, "", stop, cmd.Process.Pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	errLog, _ := os.ReadFile(filepath.Join(ndir, "error.log"))
	stop()
	return "", fmt.Sprintf("nginx did not listen on %s: %s %s", addr, strings.TrimSpace(out.String()), strings.TrimSpace(string(errLog))), func() {}, 0
}
