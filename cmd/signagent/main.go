// Command signagent is the service's authentication agent: auth.sid, legacy
// and OpenID Connect headers from a PKCS#11 token, on the command line and
// for partner systems. The command tree is package app. See README.md.
package main

import (
	"github.com/signagent/signagent/cmd/signagent/internal/app"
	"github.com/signagent/signagent/internal/cmdutil"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	cmdutil.Version = version
	app.Main()
}
