package bench

import (
	"os/exec"
	"slices"
	"strings"
)

// oldServeFlags are the names of `serve` flags before signagent renamed
// them (the address flags named by the service they reach, the
// certificate file): the release a baseline agent may be.
var oldServeFlags = map[string]string{"--trusted-url": "--base-url", "--business-url": "--api-url", "--oidc-url": "--auth-url",
	"--certificate-file": "--cert"}

// serveFlag is the spelling of the `serve` flag name that the signagent
// binary exe knows: the new one, or for a baseline agent of the release
// before the rename, the old one (a newer agent takes the old one too,
// but says so on stderr).
func serveFlag(exe, name string) string {
	if oldServeFlags[name] == "" {
		return name
	}
	out, _ := exec.Command(exe, "serve", "--help").Output()
	if strings.Contains(string(out), name) {
		return name
	}
	return oldServeFlags[name]
}

// serveArgs are args (flag and value pairs) with each flag spelled as exe
// knows it (serveFlag).
func serveArgs(exe string, args []string) []string {
	out := slices.Clone(args)
	for i := 0; i+1 < len(out); i += 2 {
		out[i] = serveFlag(exe, out[i])
	}
	return out
}
