package agent_test

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/agent/proxy"
	"github.com/signagent/signagent/bench"
)

// BenchmarkProxyPeer measures the agent's proxy against its peer, nginx
// configured as the header-injecting proxy an operator would write (a
// bearer check, a fixed Authorization header, an upstream keepalive pool,
// a buffered access log), interleaved in one run over one minimal
// upstream: the direct call, nginx, the agent's proxy over TCP with its
// bearer and over its Unix socket (the identity's header cached), a cached
// POST /v1/authorizations (OpenID Connect and legacy) and GET /readyz, at
// concurrency 1 and 8, and the Go floor (bench.FloorProxy: Go's HTTP
// server with no agent work). It reports p50 and p99 of each and the
// ratios the issue sets goals for, and those against the floor. Without
// Debian's nginx the nginx rows are skipped with a message (make gobench
// installs it).
func BenchmarkProxyPeer(b *testing.B) {
	up := httptest.NewServer(bench.UpstreamHandler)
	defer up.Close()
	const bearer = "0123456789abcdef0123456789abcdef"
	h := start(b, options{oidc: true, legacy: true, apiURL: up.URL, auditFile: true, bearer: bearer})

	tcp := &http.Transport{MaxIdleConnsPerHost: 16}
	sock := &http.Transport{MaxIdleConnsPerHost: 16, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.sock)
	}}
	get := func(tr http.RoundTripper, url string, hdr ...string) func() error {
		return func() error {
			req, _ := http.NewRequest("GET", url, nil)
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			return roundTrip(tr, req)
		}
	}
	post := func(tr http.RoundTripper, url, body string) func() error {
		return func() error {
			req, _ := http.NewRequest("POST", url, strings.NewReader(body))
			return roundTrip(tr, req)
		}
	}
	method := "/GetMyOrganizations?autoRegister=false"
	paths := []struct {
		name string
		call func() error
	}{
		{"direct", get(tcp, up.URL+method, "Authorization", "Bearer upstream")},
		{"proxy-tcp", get(tcp, "http://"+strings.TrimPrefix(h.tcp, "tcp:")+"/v1/service"+method, "Authorization", "Bearer "+bearer, proxy.IdentityHeader, "oidc")},
		{"proxy-unix", get(sock, "http://agent/v1/service"+method, proxy.IdentityHeader, "oidc")},
		{"authz-oidc", post(sock, "http://agent/v1/authorizations", `{"scheme":"oidc"}`)},
		{"authz-legacy", post(sock, "http://agent/v1/authorizations", `{"scheme":"legacy","by":"password","login":"alice@example.com"}`)},
		{"readyz", get(sock, "http://agent/readyz")},
	}
	// The Go floor (bench.FloorProxy): Go's HTTP server with the agent's
	// timeouts and no agent work, over the same upstream.
	fl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	floor := bench.FloorServer(bench.FloorProxy(up.Listener.Addr().String(), bearer))
	go floor.Serve(fl)
	defer floor.Close()
	paths = append(paths, struct {
		name string
		call func() error
	}{"go-floor", get(tcp, "http://"+fl.Addr().String()+method, "Authorization", "Bearer "+bearer)})
	url, why, stopNginx, _ := bench.StartNginx(up.Listener.Addr().String(), bearer)
	defer stopNginx()
	if url != "" {
		paths = append(paths, struct {
			name string
			call func() error
		}{"nginx", get(tcp, url+method, "Authorization", "Bearer "+bearer)})
	} else {
		b.Logf("nginx rows skipped: %s", why)
	}
	for _, p := range paths { // warm: headers cached, connections open
		if err := p.call(); err != nil {
			b.Fatalf("%s: %v", p.name, err)
		}
	}
	c1 := map[string][]time.Duration{}
	c8 := map[string][]time.Duration{}
	// Each round takes the rows in a new order (the same orders in every
	// run), so that every row follows every other about equally often: a
	// call right after a proxied one was measured about 10 µs slower,
	// whichever row it was.
	order := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		order.Shuffle(len(paths), func(i, j int) { paths[i], paths[j] = paths[j], paths[i] })
		for _, p := range paths {
			c1[p.name] = append(c1[p.name], timed(b, p.call))
		}
		for _, p := range paths {
			c8[p.name] = append(c8[p.name], parallel(b, 8, p.call)...)
		}
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	for _, p := range paths {
		b.ReportMetric(us(median(c1[p.name])), p.name+"-c1-p50-µs")
		b.ReportMetric(us(percentile(c8[p.name], 99)), p.name+"-c8-p99-µs")
	}
	ratio := func(name string, a, c time.Duration) { b.ReportMetric(float64(a)/float64(c), name) }
	if len(c1["nginx"]) > 0 {
		ratio("proxy-tcp/nginx-c1-p50", median(c1["proxy-tcp"]), median(c1["nginx"]))
		ratio("proxy-tcp/nginx-c8-p99", percentile(c8["proxy-tcp"], 99), percentile(c8["nginx"], 99))
		ratio("go-floor/nginx-c1-p50", median(c1["go-floor"]), median(c1["nginx"]))
	}
	ratio("proxy-tcp/go-floor-c1-p50", median(c1["proxy-tcp"]), median(c1["go-floor"]))
	ratio("proxy-unix/direct-c1-p50", median(c1["proxy-unix"]), median(c1["direct"]))
	ratio("proxy-unix/(direct+hop)-c1-p50", median(c1["proxy-unix"]), median(c1["direct"])+median(c1["readyz"]))
	ratio("authz-oidc/readyz-c1-p50", median(c1["authz-oidc"]), median(c1["readyz"]))
	ratio("authz-legacy/readyz-c1-p50", median(c1["authz-legacy"]), median(c1["readyz"]))
}
