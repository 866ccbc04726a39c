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
		Action: func(c *cli.Context) error {
			b := cmdutil.CurrentBuild()
			if c.Bool("json") {
				return cmdutil.WriteJSON(e, b)
			}
			_, err := fmt.Fprintln(e.Stdout, b)
			return err
		},
	}
}
