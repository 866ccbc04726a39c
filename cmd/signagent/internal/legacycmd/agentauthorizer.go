package legacycmd

import (
	"context"
	"time"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
)

// agentAuthorizer is the Authorizer of signagent api through the agent:
// the agent's cached header, a fresh one asked for after the service
// refused it.
type agentAuthorizer struct {
	Client  *agentclient.Client
	Request agentapi.AuthorizationRequest
	refresh bool
}

func (a *agentAuthorizer) Header(ctx context.Context) (authz.Header, error) {
	req := a.Request
	req.Refresh, a.refresh = a.refresh, false
	resp, err := a.Client.Authorization(ctx, req)
	if err != nil {
		return authz.Header{}, factory.AgentCallError(err)
	}
	return authz.Header{Value: resp.Authorization, ExpiresAt: resp.ExpiresAt.Time, Cached: resp.Cached, Source: "agent"}, nil
}

func (a *agentAuthorizer) Reject(string)        { a.refresh = true }
func (a *agentAuthorizer) Forget(time.Duration) { a.refresh = true }
func (a *agentAuthorizer) Identity() string     { return a.Request.Scheme + " identity through the agent" }
func (a *agentAuthorizer) String() string       { return a.Identity() }
