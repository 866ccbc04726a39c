package configcmd

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
)

func versionCommand(e *cmdutil.Env) *cli.Command {
	return &cli.Command{
		Name:        "version",
		Usage:       "print signagent's version, commit, Go version and platform",
		UsageText:   "signagent version [--json]",
		Description: cmdutil.Examples("signagent version", "signagent version --json", "signagent --version"),
		Flags:       []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action:      func(c *cli.Context) error { return runVersion(e, readVersion(c)) },
	}
}

// versionOptions are what version is told: the form of the answer.
type versionOptions struct{ JSON bool }

// readVersion reads version's flags.
func readVersion(c *cli.Context) versionOptions { return versionOptions{JSON: c.Bool("json")} }

// runVersion prints the build.
func runVersion(e *cmdutil.Env, o versionOptions) error {
	b := cmdutil.CurrentBuild()
	if o.JSON {
		return cmdutil.WriteJSON(e, b)
	}
	_, err := fmt.Fprintln(e.Stdout, b)
	return err
}
