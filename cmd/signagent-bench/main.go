// Command signagent-bench measures the token, CMS signing and the agent
// (the signagent beside it, else the one in $PATH) in one run, with its
// own emulator of the service, and the agent's proxy against nginx (see
// docs/BENCHMARKS.md). It is not in the Debian package: the emulator it
// starts is no part of the shipped signagent.
package main

import (
	"github.com/signagent/signagent/cmd/internal/benchcmd"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	cmdutil.Version = version
	benchcmd.Main()
}
