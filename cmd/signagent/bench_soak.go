package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/api"
	"github.com/signagent/signagent/bench"
	"github.com/signagent/signagent/pkcs11"
)

// runSoak drives /v1/signatures at a fixed concurrency for --duration and
// reports the agent's resident memory and goroutines at the start (after a
// warm-up) and at the end.
func runSoak(c *cli.Context, e *env, workers int, delay time.Duration) error {
	total, conc := c.Duration("duration"), max(c.Int("soak-concurrency"), 1)
	sock, pid := c.String("socket"), c.Int("agent-pid")
	if sock == "" {
		sel, err := selection(c)
		if err != nil {
			return err
		}
		key, err := pkcs11.Open(context.Background(), sel, zerolog.Nop())
		if err != nil {
			return err
		}
		var cert *x509.Certificate = key.Certificate()
		key.Close()
		apiKey := benchAPIKey(c)
		stop, s, p, _, err := startAgent(c, e, cert, apiKey, workers, delay)
		if err != nil {
			return err
		}
		defer stop()
		sock, pid = s, p
	}
	client := agentclient.NewUnix(sock)
	sign := func(ctx context.Context) string {
		_, err := client.Sign(ctx, api.SignatureRequest{Credential: api.Credential{Phone: "9161234567"}})
		return errKind(err)
	}
	fmt.Fprintf(e.stderr, "bench: soak, %d callers for %v...\n", conc, total)
	bench.Run("warm-up", conc, min(5*time.Second, max(total/10, 200*time.Millisecond)), sign)
	rss0, _ := bench.RSS(pid)
	g0, _ := goroutines(sock)
	r := bench.Run("soak /v1/signatures", conc, total, sign)
	time.Sleep(time.Second) // let the last connections settle
	rss1, _ := bench.RSS(pid)
	g1, _ := goroutines(sock)
	fmt.Fprintf(e.stdout, "signagent bench --soak: %s, %d callers for %v, token workers %d\n",
		time.Now().UTC().Format("2006-01-02"), conc, total, workers)
	bench.Table(e.stdout, []*bench.Result{r}, nil)
	fmt.Fprintf(e.stdout, "agent resident memory: %s at the start, %s at the end (%+.1f MB)\n", bench.MB(rss0), bench.MB(rss1), float64(rss1-rss0)/(1<<20))
	fmt.Fprintf(e.stdout, "agent goroutines:      %d at the start, %d at the end\n", g0, g1)
	return nil
}

// goroutines reads go_goroutines from the agent's /metrics.
func goroutines(sock string) (int, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}, Timeout: 5 * time.Second}
	resp, err := hc.Get("http://signagent/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no go_goroutines in the metrics")
}
