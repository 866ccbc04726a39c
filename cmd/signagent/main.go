// Command signagent is the service's authentication agent: auth.sid, legacy
// and OpenID Connect headers from a PKCS#11 token, on the command line and
// for partner systems. The command tree is package app. See README.md.
package main

import (
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/app"
)

// version and commit are set at build time with -ldflags "-X
// main.version=... -X main.commit=..." (make build, scripts/package.sh,
// scripts/image.sh, .goreleaser.yaml); without the commit, the one Go
// stamped from the git checkout is used (none in a build from a source
// archive or the module proxy).
var version, commit = "dev", ""

func main() {
	cmdutil.Version, cmdutil.Commit = version, commit
	app.Main()
}
