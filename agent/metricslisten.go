package agent

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/signagent/signagent/agent/listen"
	"github.com/signagent/signagent/agentapi"
)

// The metrics listener (--metrics-listen): a TCP socket of its own serving
// /metrics, /livez and /readyz alone, without the bearer token, so that a
// Prometheus scrapes the agent without holding the key that opens the
// proxy and every route for every identity (as oauth2-proxy's
// --metrics-address and Vault's unauthenticated metrics listener do).
// Every other path is 404 there: nothing on it signs, logs in or calls the
// service. It takes TLS from the TLS files when they are given and, as
// every TCP listener, refuses an address beyond loopback without them.

// metricsPaths are the metrics listener's routes (GET and HEAD only).
var metricsPaths = []string{"/metrics", "/livez", "/readyz"}

// parseMetricsListen is --metrics-listen's HOST:PORT (tcp:HOST:PORT, as
// --listen spells it, is taken too).
func parseMetricsListen(spec string) (string, error) {
	addr := strings.TrimPrefix(spec, "tcp:")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		why := err.Error()
		var ae *net.AddrError
		if errors.As(err, &ae) {
			why = ae.Err // without the address, already quoted
		}
		return "", badConfig(fmt.Errorf("--metrics-listen %q: want HOST:PORT, e.g. 127.0.0.1:9464 (%s)", spec, why))
	}
	return addr, nil
}

// listenMetrics opens the metrics listener, when one is configured.
func (d *Daemon) listenMetrics() error {
	if d.cfg.MetricsListen == "" {
		return nil
	}
	addr, err := parseMetricsListen(d.cfg.MetricsListen)
	if err != nil {
		return err
	}
	tlsCfg, err := d.serverTLS()
	if err != nil {
		return err
	}
	l, err := listen.ListenTCP(addr, tlsCfg)
	if errors.Is(err, listen.ErrInsecureListen) {
		return badConfig(fmt.Errorf("--metrics-listen: %w", err))
	}
	if err != nil {
		return fmt.Errorf("--metrics-listen: %w", err)
	}
	d.metricsLn = l
	return nil
}

// metricsHandler serves the metrics listener's routes, and 404 (405 for
// another method on them) to everything else.
func (a *Agent) metricsHandler() http.Handler {
	handlers := map[string]http.HandlerFunc{
		"/metrics": a.metrics.Handler().ServeHTTP,
		"/livez":   a.healthz,
		"/readyz":  a.readyz,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := handlers[r.URL.Path]
		switch {
		case !ok:
			writeError(w, http.StatusNotFound, APIError{Code: agentapi.CodeNotFound, Message: "no such endpoint on the metrics listener: " + r.Method + " " + r.URL.Path + " (it serves " + strings.Join(metricsPaths, ", ") + ")"})
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, APIError{Code: agentapi.CodeMethodNotAllowed, Message: r.Method + " is not allowed on " + r.URL.Path + "; use GET"})
		default:
			h(w, r)
		}
	})
}
