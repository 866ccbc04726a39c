package agentcmd

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/store"
)

// storeKeyCommand makes a shared store's key file.
func storeKeyCommand(e *cmdutil.Env) *cli.Command {
	return &cli.Command{
		Name:      "store-key",
		Usage:     "make a key file for a shared store (--store redis://...): 256 random bits in hex, mode 0600",
		UsageText: "signagent store-key --out FILE",
		Description: "Every agent on one shared store needs the same key file (--store-key-file). To rotate the key, put a new\n" +
			"key on the file's first line and keep the old ones below it: values are read with any of them and written\n" +
			"with the first; the last line names the records, so keep it. Quiet with -q.\n\n" +
			cmdutil.Examples("signagent store-key --out /etc/signagent/store.key", "signagent store-key -q --out store.key"),
		Flags:  []cli.Flag{&cli.StringFlag{Name: "out", Usage: "write the key to `FILE` (never over an existing file)"}},
		Action: cmdutil.Run(e, readStoreKey, runStoreKey),
	}
}

// storeKeyOptions are what store-key is told: the file to make, and
// whether to say so.
type storeKeyOptions struct {
	Out   string
	Quiet bool
}

// readStoreKey reads store-key's flags.
func readStoreKey(c *cli.Context) (storeKeyOptions, error) {
	o := storeKeyOptions{Out: c.String("out"), Quiet: cmdutil.Quiet(c)}
	if o.Out == "" {
		return o, cmdutil.UsageErr(errors.New("give the key file with --out FILE (the key is never printed)"))
	}
	return o, nil
}

// runStoreKey makes the key file (never over an existing file).
func runStoreKey(_ context.Context, e *cmdutil.Env, o storeKeyOptions) error {
	if err := store.NewKeyFile(o.Out); err != nil {
		return cmdutil.UsageErr(err)
	}
	if o.Quiet {
		return nil
	}
	fmt.Fprintf(e.Stderr, "wrote a new store key to %s (mode 0600); give every agent on the store the same file with --store-key-file\n", o.Out)
	return nil
}
