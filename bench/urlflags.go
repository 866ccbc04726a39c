package bench

import (
	"os/exec"
	"strings"
)

// oldURLFlags are the service address flags' names before signagent named
// them by the service they reach (the release the baseline agent may be).
var oldURLFlags = map[string]string{"--trusted-url": "--base-url", "--business-url": "--api-url", "--oidc-url": "--auth-url"}

// urlFlag is the spelling of the address flag name that the signagent
// binary exe knows: the new one, or for a baseline agent of the release
// before the rename, the old one (a newer agent takes the old one too,
// but says so on stderr).
func urlFlag(exe, name string) string {
	out, _ := exec.Command(exe, "serve", "--help").Output()
	if strings.Contains(string(out), name) || oldURLFlags[name] == "" {
		return name
	}
	return oldURLFlags[name]
}
