package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/pkcs11"
)

// Soak drives /v1/signatures with o.SoakCallers for o.Duration and reports
// the agent's resident memory and goroutines at the start (after a
// warm-up) and at the end.
func Soak(ctx context.Context, o Options) error {
	o.Workers = max(o.Workers, 1)
	conc := max(o.SoakCallers, 1)
	sock, pid := o.Socket, o.AgentPID
	if sock == "" {
		key, err := pkcs11.Open(ctx, o.Token, zerolog.Nop())
		if err != nil {
			return err
		}
		cert := key.Certificate()
		key.Close()
		a, err := StartAgent(ctx, &o, cert)
		if err != nil {
			return err
		}
		defer a.Stop()
		sock, pid = a.Socket, a.PID
	}
	sign := signOp(agentclient.NewUnix(sock))
	o.say("soak, %d callers for %v...", conc, o.Duration)
	RunContext(ctx, "warm-up", conc, min(5*time.Second, max(o.Duration/10, 200*time.Millisecond)), sign)
	rss0, _ := RSS(pid)
	g0, _ := goroutines(sock)
	r := RunContext(ctx, "soak /v1/signatures", conc, o.Duration, sign)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	time.Sleep(time.Second) // let the last connections settle
	rss1, _ := RSS(pid)
	g1, _ := goroutines(sock)
	if o.JSON {
		return JSON(o.Stdout, map[string]any{"mode": "soak", "date": time.Now().UTC().Format("2006-01-02"), "callers": conc,
			"duration": o.Duration.String(), "tokenWorkers": o.Workers, "rssStartBytes": rss0, "rssEndBytes": rss1,
			"goroutinesStart": g0, "goroutinesEnd": g1}, []*Result{r}, nil)
	}
	fmt.Fprintf(o.Stdout, "signagent-bench --soak: %s, %d callers for %v, token workers %d\n",
		time.Now().UTC().Format("2006-01-02"), conc, o.Duration, o.Workers)
	Table(o.Stdout, []*Result{r}, nil)
	fmt.Fprintf(o.Stdout, "agent resident memory: %s at the start, %s at the end (%+.1f MB)\n", MB(rss0), MB(rss1), float64(rss1-rss0)/(1<<20))
	fmt.Fprintf(o.Stdout, "agent goroutines:      %d at the start, %d at the end\n", g0, g1)
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
