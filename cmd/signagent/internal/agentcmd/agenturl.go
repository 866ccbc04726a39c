package agentcmd

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/safefile"
)

// The agent over TCP (--agent-url): its listener with the bearer token,
// or its metrics listener (--metrics-listen), which serves /livez and
// /readyz without one; what a pod other than the agent's own asks, as
// the chart's helm test hook does. The token is read from a file, never
// taken as an argument.

// agentURLFlags are the flags that reach the agent over TCP.
func agentURLFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "agent-url", Category: cmdutil.CatAgentUse, EnvVars: []string{"SIGNAGENT_AGENT_URL"},
			Usage: "ask the agent at `URL` over TCP instead of its Unix socket: https://HOST:PORT of its listener (with --bearer-token-file) or of its metrics listener (--metrics-listen: /livez and /readyz without a token, enough for --probe)"},
		&cli.StringFlag{Name: "agent-ca", Category: cmdutil.CatAgentUse, EnvVars: []string{"SIGNAGENT_AGENT_CA"},
			Usage: "with --agent-url: the CA bundle `FILE` the agent's TLS certificate must chain to (default: the system's)"},
		&cli.StringFlag{Name: "agent-cert", Category: cmdutil.CatAgentUse, EnvVars: []string{"SIGNAGENT_AGENT_CERT"},
			Usage: "with --agent-url: the client certificate `FILE` (PEM) to present when the agent asks for one (its --tls-client-ca)"},
		&cli.StringFlag{Name: "agent-key", Category: cmdutil.CatAgentUse, EnvVars: []string{"SIGNAGENT_AGENT_KEY"},
			Usage: "with --agent-url: the key `FILE` (PEM, closed to others) of --agent-cert"},
		&cli.StringFlag{Name: "bearer-token-file", Category: cmdutil.CatAgentUse, EnvVars: []string{"SIGNAGENT_BEARER_TOKEN_FILE"},
			Usage: "with --agent-url: the agent's bearer token from `FILE` (its own --bearer-token-file), for its listener; the metrics listener needs none"},
	}
}

// agentURLOptions are the agent-over-TCP flags, as given.
type agentURLOptions struct {
	URL, CA, Cert, Key, BearerFile string
}

// readAgentURL reads the agent-over-TCP flags.
func readAgentURL(c *cli.Context) agentURLOptions {
	return agentURLOptions{URL: c.String("agent-url"), CA: c.String("agent-ca"), Cert: c.String("agent-cert"),
		Key: c.String("agent-key"), BearerFile: c.String("bearer-token-file")}
}

// tcpAgent is the client of the agent --agent-url names ("" when it names
// none: the Unix socket's), and the URL to name it by.
func tcpAgent(o agentURLOptions) (*agentclient.Client, string, error) {
	raw := o.URL
	if raw == "" {
		for _, f := range []struct{ name, v string }{{"agent-ca", o.CA}, {"agent-cert", o.Cert}, {"agent-key", o.Key}} {
			if f.v != "" {
				return nil, "", cmdutil.UsageErr(fmt.Errorf("--%s is for the agent over TCP: give --agent-url too", f.name))
			}
		}
		return nil, "", nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Trim(u.Path, "/") != "" {
		return nil, "", cmdutil.UsageErr(fmt.Errorf("--agent-url %q: want https://HOST:PORT (http:// on loopback), the agent's listener or metrics listener", raw))
	}
	base := u.Scheme + "://" + u.Host
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		// The agent serves TCP beyond loopback over TLS alone; whatever
		// answers there in clear would be sent the bearer token.
		return nil, "", cmdutil.UsageErr(fmt.Errorf("--agent-url %s: plain http beyond loopback; want https://", base))
	}
	var tlsCfg *tls.Config
	if u.Scheme == "https" {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		if f := o.CA; f != "" {
			pem, err := safefile.Read(f, 1<<20)
			if err != nil {
				return nil, "", cmdutil.UsageErr(fmt.Errorf("--agent-ca: %w", err))
			}
			tlsCfg.RootCAs = x509.NewCertPool()
			if !tlsCfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, "", cmdutil.UsageErr(fmt.Errorf("--agent-ca %s holds no PEM certificate", f))
			}
		}
		cert, key := o.Cert, o.Key
		if (cert == "") != (key == "") {
			return nil, "", cmdutil.UsageErr(fmt.Errorf("--agent-cert and --agent-key go together"))
		}
		if cert != "" {
			if err := safefile.CheckSecret(key, 0); err != nil {
				return nil, "", cmdutil.UsageErr(fmt.Errorf("--agent-key: %w", err))
			}
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, "", cmdutil.UsageErr(fmt.Errorf("--agent-cert %s and --agent-key %s: %w", cert, key, err))
			}
			tlsCfg.Certificates = []tls.Certificate{pair}
		}
	} else if o.CA != "" || o.Cert != "" {
		return nil, "", cmdutil.UsageErr(fmt.Errorf("--agent-url %s is not https: --agent-ca and --agent-cert are for TLS", base))
	}
	var bearer string
	if f := o.BearerFile; f != "" {
		b, err := safefile.ReadSecret(f, 4096, 0)
		if err != nil {
			return nil, "", cmdutil.UsageErr(fmt.Errorf("--bearer-token-file: %w", err))
		}
		bearer = strings.TrimSpace(string(b))
	}
	return agentclient.NewTCP(base, bearer, tlsCfg), base, nil
}

// loopback reports whether host is this machine's loopback.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
