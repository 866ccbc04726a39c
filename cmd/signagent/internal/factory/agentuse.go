package factory

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/errdefs"
)

// The CLI through a running agent, the ssh-agent idiom: when
// SIGNAGENT_AGENT_SOCK (--agent-sock, or agent-sock in the settings file)
// names the agent's socket, sign, session, header, token, legacy token
// and api ask the agent instead of opening the token or logging in here,
// so that the agent's caches serve them and one process holds the card.

// AgentUseFlags choose whether a command asks the running agent.
func AgentUseFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "agent-sock", Category: cmdutil.CatAgentUse, EnvVars: []string{agentclient.SocketEnv},
			Usage: "ask the agent listening on the Unix socket `PATH` instead of opening the token or logging in here (signagent serve --print-env prints it)"},
		cmdutil.OneOf(&cli.StringFlag{Name: "agent", Category: cmdutil.CatAgentUse, EnvVars: []string{"SIGNAGENT_AGENT"},
			Usage: "`MODE`: on (ask the agent; an agent that cannot be reached is an error), auto (do it here, with a warning, when it cannot be reached) or off (default: on when --agent-sock or $SIGNAGENT_AGENT_SOCK names the socket, auto when only the settings file does)"},
			"on", "auto", "off"),
		&cli.BoolFlag{Name: "no-agent", Category: cmdutil.CatAgentUse, Usage: "do it here even when an agent is named (--agent off)"},
	}
}

// Agent is the client of the running agent the command asks, or nil
// when it does the work itself: no socket named, --no-agent, or --agent
// auto with an agent that cannot be reached. Asked once per run.
func (f *Factory) Agent() (*agentclient.Client, error) {
	return f.agentOnce.get(&f.mu, func() (*agentclient.Client, error) { return agentFor(f.c, f.Env) })
}

// agentFor is Agent for the command c.
func agentFor(c *cli.Context, e *cmdutil.Env) (*agentclient.Client, error) {
	mode := strings.ToLower(c.String("agent"))
	if !slices.Contains([]string{"", "on", "auto", "off"}, mode) {
		return nil, cmdutil.UsageErr(fmt.Errorf("--agent %q: want on, auto or off", c.String("agent")))
	}
	path := c.String("agent-sock")
	if c.Bool("no-agent") || mode == "off" || path == "" {
		return nil, nil
	}
	if mode == "" {
		mode = "on"
		if cmdutil.FromFile(c.App)["agent-sock"] {
			mode = "auto"
		}
	}
	cl, err := agentclient.FromSocket(path)
	if err == nil {
		ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
		defer cancel()
		_, err = cl.Ready(ctx)
		var ae *agentclient.Error
		if errors.As(err, &ae) && ae.Status != http.StatusForbidden {
			err = nil // it answers; a part not ready is the call's to report
		}
	}
	var ae *agentclient.Error
	switch {
	case err == nil:
		e.Log.Debug().Str("socket", path).Msg("asking the running agent")
		return cl, nil
	case errors.As(err, &ae):
		return nil, AgentCallError(fmt.Errorf("the agent at %s refuses this user: %w (--no-agent does it here)", path, err))
	case errors.Is(err, agentclient.ErrUntrustedPeer):
		// Another user's process serves the socket: not an agent that
		// cannot be reached, which auto would quietly do without.
		return nil, AgentCallError(fmt.Errorf("%w (--no-agent does it here)", err))
	case mode == "auto":
		// As ssh does with an SSH_AUTH_SOCK that names nothing: a
		// warning, and the work done here.
		e.Log.Warn().Str("socket", path).Err(err).Msg("the agent cannot be reached: doing it here")
		return nil, nil
	}
	return nil, errdefs.Mark(fmt.Errorf("the agent at %s cannot be reached: %w (--no-agent does it here)", path, err), errdefs.ErrUnreachable)
}

// AgentError gives an agent's error answer its kind, for the exit status.
func AgentCallError(err error) error {
	var ae *agentclient.Error
	if !errors.As(err, &ae) {
		if errors.Is(err, agentclient.ErrUntrustedPeer) {
			return errdefs.Mark(err, errdefs.ErrNotConfigured) // the socket named is another user's
		}
		return errdefs.Mark(err, errdefs.ErrUnreachable)
	}
	var kind error
	switch {
	case ae.Body.ServiceCode != "":
		kind = errdefs.ErrRefused
	case ae.Body.Code == agentapi.CodeSignInRequired:
		kind = errdefs.ErrSignIn
	case ae.Status == http.StatusBadRequest || ae.Status == http.StatusUnprocessableEntity:
		kind = errdefs.ErrInvalidInput
	case ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden:
		kind = errdefs.ErrForbidden
	case ae.Status == http.StatusGatewayTimeout:
		kind = errdefs.ErrTimeout
	case ae.Status == http.StatusNotFound || ae.Status == http.StatusNotImplemented:
		kind = errdefs.ErrNotConfigured
	default:
		kind = errdefs.ErrFailing
	}
	return errdefs.Mark(err, kind)
}

// AgentAuthorization asks the agent cl for the Authorization header of
// the identity req names (the command's flags, read by the command).
func (f *Factory) AgentAuthorization(ctx context.Context, cl *agentclient.Client, req agentapi.AuthorizationRequest) (*agentapi.AuthorizationResponse, error) {
	resp, err := cl.Authorization(ctx, req)
	if err != nil {
		return nil, AgentCallError(err)
	}
	return resp, nil
}
