package agent

import (
	"net/http"

	"github.com/signagent/signagent/agent/access"
)

// HandlerOf is d's API behind auth, for the benchmark that calls the
// handler chain without a socket (BenchmarkHandlerCPU).
func HandlerOf(d *Daemon, auth access.Authenticator) http.Handler { return d.agent.handler(auth) }
