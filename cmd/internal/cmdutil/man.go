package cmdutil

import (
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/internal/secret"
)

// ManPage is signagent(1): urfave/cli's page of the commands and flags,
// its title line carrying the version and date, and the sections a
// manual page has beyond them (man-pages(7)): ENVIRONMENT (every
// variable a flag or secret reads, from the flags themselves), FILES,
// EXIT STATUS (the table of exit.go), EXAMPLES and SEE ALSO.
func ManPage(app *cli.App, date time.Time) (string, error) {
	page, err := app.ToManWithSection(1)
	if err != nil {
		return "", err
	}
	title := fmt.Sprintf(".TH signagent 1 %q %q %q", date.UTC().Format("2006-01-02"), "signagent "+app.Version, "User Commands")
	page = strings.Replace(page, ".TH signagent 1", title, 1)
	var b strings.Builder
	b.WriteString(strings.TrimRight(page, "\n"))
	b.WriteString("\n\n.SH ENVIRONMENT\n")
	for _, v := range environment(app) {
		fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", v[0], roff(v[1]))
	}
	b.WriteString(manRest)
	return b.String(), nil
}

// environment is each variable with what it gives, sorted by name.
func environment(app *cli.App) [][2]string {
	seen := map[string]string{}
	add := func(flags []cli.Flag) {
		for _, fl := range flags {
			ev, ok := fl.(interface{ GetEnvVars() []string })
			if !ok || !visible(fl) { // an old spelling is not documented
				continue
			}
			for _, v := range ev.GetEnvVars() {
				if _, dup := seen[v]; !dup {
					seen[v] = "as --" + FlagName(fl)
				}
			}
		}
	}
	add(app.Flags)
	var walkCmds func([]*cli.Command)
	walkCmds = func(cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden {
				continue
			}
			add(c.Flags)
			walkCmds(c.Subcommands)
		}
	}
	walkCmds(app.Commands)
	for _, s := range secrets {
		seen[s.Env] = s.what + " itself (a secret: prefer --" + s.flag + " or $" + s.Env + "_FILE; never in argv)"
		seen[s.Env+"_FILE"] = "the file holding " + s.what + ", as --" + s.flag
	}
	seen[secret.AllowCoreDumpsEnv] = "1: leave the process dumpable, with the core size limit it was given (debugging only; by default no core file and no other process of the user reads its memory)"
	seen["SIGNAGENT_PKCS11_MODULE"] = "the PKCS#11 module's path, as --module"
	seen["XDG_CONFIG_HOME"] = "where the settings file is by default: $XDG_CONFIG_HOME/signagent/config.yaml"
	seen["XDG_STATE_HOME"] = "where the OpenID Connect tokens are kept by default: $XDG_STATE_HOME/signagent"
	seen["XDG_RUNTIME_DIR"] = "where the per-user agent's socket is: $XDG_RUNTIME_DIR/signagent/agent.sock"
	var out [][2]string
	for k, v := range seen {
		out = append(out, [2]string{k, v})
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return out
}

// roff escapes text for a roff line: backslashes, and a leading dot or
// quote that would make it a request.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

var manRest = `
.SH FILES
.TP
.I $XDG_CONFIG_HOME/signagent/config.yaml
the settings file (~/.config/signagent/config.yaml without the variable): the flags' values by name, in named contexts; never a secret, mode 0600 (\fBsignagent config\fP, \fBsignagent setup\fP)
.TP
.I $XDG_STATE_HOME/signagent/
the OpenID Connect tokens of each profile (~/.local/state/signagent without the variable), mode 0600
.TP
.I $XDG_RUNTIME_DIR/signagent/agent.sock
the per-user agent's socket; \fI/run/signagent/agent.sock\fP for the system's agent
.TP
.I /etc/signagent/
the system agent's settings and secret files in the Debian package
.SH EXIT STATUS
.TP
.B ` + strconv.Itoa(ExitOK) + `
success
.TP
.B ` + strconv.Itoa(ExitFailure) + `
a failure not listed below
.TP
.B ` + strconv.Itoa(ExitBadInput) + `
bad input or usage: a flag, argument, setting or file the command cannot use
.TP
.B ` + strconv.Itoa(ExitRefused) + `
the service refused (its code and step are in the error line)
.TP
.B ` + strconv.Itoa(ExitTransport) + `
the service or the agent could not be reached, timed out, or failed after the retries
.TP
.B ` + strconv.Itoa(ExitSignIn) + `
OpenID Connect: sign in (again) with \fBsignagent oidc login\fP
.TP
.B ` + strconv.Itoa(ExitRetry) + `
try again in a second: the service saw this signed text already
.TP
.B ` + strconv.Itoa(ExitInterrupted) + `
interrupted (Ctrl-C)
.SH EXAMPLES
.EX
signagent setup
signagent oidc login
signagent header
curl \-H "Authorization: $(signagent header)" https://api.example/GetMyOrganizations
signagent api /GetMyOrganizations
signagent trusted session \-\-phone 9161234567 \-\-service\-user\-id crm\-42
signagent serve \-\-print\-env
.EE
.SH SEE ALSO
.BR ssh\-agent (1),
.BR p11\-kit (8),
.BR softhsm2\-util (1),
.BR pkcs11\-tool (1),
.BR gh (1);
the project's docs/usage.md (the commands), docs/agent.md (the agent and its HTTP API) and docs/cli.md (every flag)
`

// ManDate is the page's date: $SOURCE_DATE_EPOCH for a reproducible
// build, else the commit's time Go recorded, else today.
func ManDate() time.Time {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(n, 0)
		}
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.time" {
				if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
					return t
				}
			}
		}
	}
	return time.Now()
}
