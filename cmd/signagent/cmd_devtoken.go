package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/softhsm"
)

func defaultDevDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "signagent", "dev-token")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "signagent", "dev-token")
	}
	return "signagent-dev-token"
}

func devTokenCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "dev-token",
		Usage: "make a SoftHSM development token (config, token, RSA-2048 key, self-signed certificate) and print the environment to use it",
		Description: "Prints shell `export` lines on stdout, so that\n\n   eval \"$(signagent dev-token)\"\n\n" +
			"points the other commands at the token. The PIN is random and kept in DIR/pin (mode 0600).\n" +
			"Run again to reuse the token; --force makes a new one. It only ever removes what it made (it marks\n" +
			"its directory with " + softhsm.DevMarker + "), and refuses a non-empty directory it did not make unless --force.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Value: defaultDevDir(), DefaultText: "$XDG_DATA_HOME/signagent/dev-token, else ~/.local/share/signagent/dev-token", Usage: "`DIR` for the SoftHSM configuration, token and PIN"},
			&cli.StringFlag{Name: "label", Value: "signagent-dev", Usage: "token and key `LABEL`"},
			pick(tokenFlags(), "module")[0],
			&cli.BoolFlag{Name: "force", Usage: "discard an existing token in DIR and make a new one (in a directory dev-token did not make: replace its files there, saying which)"},
			&cli.BoolFlag{Name: "ec", Usage: "also generate a P-256 key labelled LABEL-ec (id 02), for benchmarks"},
		},
		Action: func(c *cli.Context) error {
			dir, err := filepath.Abs(c.String("dir"))
			if err != nil {
				return usageErr(err)
			}
			if strings.ContainsFunc(dir, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				return usageErr(fmt.Errorf("--dir %s: a path with a newline or other control character cannot be used (SoftHSM's configuration cannot hold it)", strconv.Quote(dir)))
			}
			label := c.String("label")
			if label == "" || len(label) > 32 || strings.ContainsFunc(label, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				return usageErr(errors.New("--label must have 1 to 32 printable characters (a PKCS#11 token label)"))
			}
			// Not the default list: p11-kit's proxy comes first there, and
			// the development token is SoftHSM's.
			mod, err := resolveModuleFrom(c, e, pkcs11.SoftHSMModules)
			if err != nil {
				return err
			}
			if !strings.Contains(filepath.Base(mod.Path), "softhsm") {
				return usageErr(fmt.Errorf("dev-token needs the SoftHSM module, not %s; install softhsm2 or give --module", mod.Path))
			}
			dt := softhsm.DevToken{Dir: dir, Label: label, Module: mod.Path, EC: c.Bool("ec"), Force: c.Bool("force"), Log: e.log}
			reuse, err := dt.Make()
			if err != nil {
				if errors.Is(err, softhsm.ErrForeignDir) {
					return usageErr(err)
				}
				return err
			}
			return dt.WriteEnv(e.stdout, reuse)
		},
	}
}
