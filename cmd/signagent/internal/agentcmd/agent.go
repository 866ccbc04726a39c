package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
)

// agentCommand asks a running agent how it is and what it holds, as
// ssh-add -l asks ssh-agent.
func agentCommand(e *cmdutil.Env) *cli.Command {
	sub := func(name, usage, shape string, action func(context.Context, *cmdutil.Env, *agentclient.Client, agentOptions) error) *cli.Command {
		return &cli.Command{
			Name: name, Usage: usage,
			Flags: cmdutil.Concat([]cli.Flag{
				&cli.StringFlag{Name: "agent-sock", Category: cmdutil.CatAgentUse, EnvVars: []string{agentclient.SocketEnv},
					Usage: "the agent's Unix socket `PATH` (default: the per-user agent's, " + agent.DefaultSocket() + ")"},
				cmdutil.JSONFlag(shape),
			}, agentURLFlags(), cmdutil.SettingsFlags(true), cmdutil.LogFlags("Logging")),
			Before: cmdutil.LoadSettings,
			Action: func(c *cli.Context) error {
				if err := cmdutil.NoArgs(c); err != nil {
					return err
				}
				o := readAgent(c)
				cl, err := runningAgent(&o)
				if err != nil {
					return err
				}
				return action(c.Context, e, cl, o)
			},
		}
	}
	return &cli.Command{
		Name:  "agent",
		Args:  true, // checked by the command itself (its subcommands, or its own arguments)
		Usage: "ask the running agent how it is and which identities it holds headers for (like ssh-add -l)",
		Description: "The agent is the one SIGNAGENT_AGENT_SOCK, --agent-sock or agent-sock in the settings file names,\n" +
			"else the per-user agent's socket; or, over TCP, the one --agent-url names (the chart's helm test asks the\n" +
			"metrics listener so). Exit 4 when it cannot be reached.\n\n" +
			cmdutil.Examples("signagent agent status", "signagent agent identities", "signagent agent identities --json",
				"signagent agent status --probe ready --agent-url https://signagent.partners.svc:9464 --agent-ca ca.crt"),
		Subcommands: []*cli.Command{
			withFlags(sub("status", "the readiness of each part, the token and its queue, the identities held by scheme",
				`{"socket","status","checks","token","queue","identities"}`, agentStatus),
				&cli.StringFlag{Name: "probe", Category: cmdutil.CatAgentUse,
					Usage:  "answer by the exit status alone, as a container's probe: `KIND` live (GET /healthz, /livez with --agent-url: 0 when the agent serves) or ready (GET /readyz: 0 when the agent can serve, degraded included - a shared store, the service or the identity provider down; 1 when its own token or configuration cannot)",
					Action: func(_ *cli.Context, v string) error { return probeKind(v) }}),
			sub("identities", "the identities the agent holds a header for: scheme, identity, the header masked, expiry",
				`{"identities":[{"scheme","identity","subject","header","expiresAt","lastUsed","uses"}]}`, agentIdentities),
		},
	}
}

// agentOptions are what agent status and agent identities are told: the
// agent's socket (the per-user agent's when none is named) or its URL
// over TCP, status's --probe, and the form of the answer.
type agentOptions struct {
	Socket string
	TCP    agentURLOptions
	Probe  string
	JSON   bool
	// overTCP is set by runningAgent when the agent is asked over TCP
	// (Socket then names its URL).
	overTCP bool
}

// readAgent reads the agent commands' flags (identities has no --probe:
// it reads "").
func readAgent(c *cli.Context) agentOptions {
	o := agentOptions{Socket: c.String("agent-sock"), TCP: readAgentURL(c), Probe: c.String("probe"), JSON: c.Bool("json")}
	if o.Socket == "" {
		o.Socket = agent.DefaultSocket()
	}
	return o
}

// runningAgent is the client of the agent the options name (the
// per-user one by default, else the one --agent-url names), checked to be
// there when it is a Unix socket.
func runningAgent(o *agentOptions) (*agentclient.Client, error) {
	if cl, base, err := tcpAgent(o.TCP); err != nil || cl != nil {
		o.Socket, o.overTCP = base, cl != nil
		return cl, err
	}
	path := o.Socket
	cl, err := agentclient.FromSocket(path)
	if err != nil {
		return nil, factory.AgentCallError(fmt.Errorf("the agent at %s cannot be reached: %w", path, err))
	}
	return cl, nil
}

func withFlags(cmd *cli.Command, flags ...cli.Flag) *cli.Command {
	cmd.Flags = append(flags, cmd.Flags...)
	return cmd
}

// agentStatus prints the agent's readiness, part by part, and the
// identities it holds by scheme (or answers a probe by the exit status).
func agentStatus(ctx context.Context, e *cmdutil.Env, cl *agentclient.Client, o agentOptions) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	path := o.Socket
	if probe := o.Probe; probe != "" {
		return agentProbe(ctx, cl, path, probe, o.overTCP)
	}
	ready, err := cl.Ready(ctx)
	var ae *agentclient.Error
	if err != nil && !(errors.As(err, &ae) && ae.Status == 503) {
		return factory.AgentCallError(fmt.Errorf("the agent at %s: %w", path, err))
	}
	// The identities, when this caller may see them (the authorizations
	// route rule).
	counts := map[string]int{}
	ids, idErr := cl.Identities(ctx)
	for _, id := range ids {
		counts[id.Scheme]++
	}
	if o.JSON {
		doc := map[string]any{"socket": path, "status": ready.Status, "checks": ready.Checks, "identities": counts}
		if ready.Token != (agentapi.TokenState{}) {
			doc["token"] = ready.Token
		}
		if ready.Queue != nil {
			doc["queue"] = ready.Queue
		}
		if idErr != nil {
			doc["identities"] = nil
		}
		return cmdutil.WriteJSON(e, doc)
	}
	w := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "agent\t%s\t%s\n", path, ready.Status)
	parts := make([]string, 0, len(ready.Checks))
	for name := range ready.Checks {
		parts = append(parts, name)
	}
	slices.Sort(parts)
	for _, name := range parts {
		ch := ready.Checks[name]
		state := "ready"
		switch {
		case !ch.Ready && ch.Dependency:
			state = "down (shared: the agent serves what it holds): " + ch.Reason
		case !ch.Ready:
			state = "not ready: " + ch.Reason
		}
		detail := ""
		if name == "token" && ready.Token.Key != "" {
			detail = fmt.Sprintf("key %s, certificate %s, since %s", ready.Token.Key, ready.Token.Thumbprint, ready.Token.Since.Local().Format(time.DateTime))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", name, state, detail)
	}
	if q := ready.Queue; q != nil {
		fmt.Fprintf(w, "queue\t%d waiting or running\t%d dropped since the start\n", q.Depth, q.Dropped)
	}
	switch {
	case idErr != nil:
		fmt.Fprintf(w, "identities\tnot shown to this caller\t%v\n", idErr)
	default:
		var by []string
		for _, s := range slices.Sorted(maps.Keys(counts)) {
			by = append(by, fmt.Sprintf("%s %d", s, counts[s]))
		}
		fmt.Fprintf(w, "identities\t%d held\t%s\n", len(ids), strings.Join(by, ", "))
	}
	return w.Flush()
}

// agentIdentities lists the identities the agent holds a header for.
func agentIdentities(ctx context.Context, e *cmdutil.Env, cl *agentclient.Client, o agentOptions) error {
	ids, err := cl.Identities(ctx)
	if err != nil {
		return factory.AgentCallError(err)
	}
	if o.JSON {
		return cmdutil.WriteJSON(e, map[string]any{"identities": cmdutil.NonNil(ids)})
	}
	w := cmdutil.Table(e, len(ids), "The agent holds no header.", "SCHEME\tIDENTITY\tHEADER\tEXPIRES\tLAST USED\tUSES")
	if w == nil {
		return nil
	}
	for _, id := range ids {
		who := id.Identity
		if id.Subject != "" {
			who += " (" + id.Subject + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\n", id.Scheme, who, id.Header, id.ExpiresAt.Local().Format(time.DateTime),
			id.LastUsed.Local().Format(time.DateTime), id.Uses)
	}
	return w.Flush()
}

// agentProbe answers a container's probe through the Unix socket, or
// over TCP (tcp) through the metrics listener, which serves /livez and
// /readyz without the bearer token (every route of the main TCP listener
// needs it, and a probe in a pod's spec must not carry it). Silent when
// the answer is yes.
func agentProbe(ctx context.Context, cl *agentclient.Client, path, probe string, tcp bool) error {
	switch probe {
	case "live":
		alive := cl.Alive
		if tcp {
			alive = cl.Live // the metrics listener has no /healthz
		}
		if err := alive(ctx); err != nil {
			return factory.AgentCallError(fmt.Errorf("the agent at %s: %w", path, err))
		}
		return nil
	case "ready":
		ready, err := cl.Ready(ctx)
		var ae *agentclient.Error
		if err != nil && !(errors.As(err, &ae) && ae.Status == 503) {
			return factory.AgentCallError(fmt.Errorf("the agent at %s: %w", path, err))
		}
		if err == nil {
			return nil
		}
		var why []string
		for _, name := range slices.Sorted(maps.Keys(ready.Checks)) {
			if ch := ready.Checks[name]; !ch.Ready {
				why = append(why, name+": "+ch.Reason)
			}
		}
		return cmdutil.Exit(cmdutil.ExitFailure, fmt.Errorf("the agent at %s is not ready: %s", path, strings.Join(why, "; ")))
	}
	return probeKind(probe)
}

// probeKind refuses a --probe other than live or ready (before the agent
// is asked).
func probeKind(v string) error {
	if v != "live" && v != "ready" {
		return cmdutil.UsageErr(fmt.Errorf("--probe %q: want live or ready", v))
	}
	return nil
}
