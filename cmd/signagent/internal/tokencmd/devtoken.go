package tokencmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/devtoken"
	"github.com/signagent/signagent/pkcs11/locate"
)

// defaultDevDir is where token dev keeps a token of kind: today's place for
// the default RSA token, a directory of its own for each other kind, so
// that they live side by side.
func defaultDevDir(kind string) string {
	name := "dev-token"
	if kind != devtoken.KindRSA {
		name += "-" + kind
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "signagent", name)
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "signagent", name)
	}
	return "signagent-" + name
}

func devCommand(e *cmdutil.Env) *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "make a development token (SoftHSM with an RSA-2048 or P-256 key, or the GOST test module) with a self-signed certificate, and print the environment to use it",
		Description: "Prints shell `export` lines on stdout, so that\n\n   eval \"$(signagent token dev)\"\n\n" +
			"points the other commands at the token. The PIN is random and kept in DIR/pin (mode 0600).\n" +
			"--key-type gost2012-256 or gost2012-512 makes a GOST R 34.10-2012 key with certtool and builds the GOST\n" +
			"test module with gcc (gnutls-bin, gcc, libgnutls28-dev and libgcrypt20-dev needed): a software stand-in for a Rutoken or\n" +
			"JaCarta card, for development only (its key is a file in DIR).\n" +
			"Run again to reuse the token; --force makes a new one. It only ever removes what it made (it marks\n" +
			"its directory with " + devtoken.Marker + "), and refuses a non-empty directory it did not make unless --force.\n\n" +
			cmdutil.Examples("signagent token dev", "signagent token dev --key-type gost2012-256", "signagent token dev --force"),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", DefaultText: "$XDG_DATA_HOME/signagent/dev-token[-KIND], else ~/.local/share/signagent/dev-token[-KIND]", Usage: "`DIR` for the token, its configuration and PIN"},
			&cli.StringFlag{Name: "key-type", Value: devtoken.KindRSA, Usage: "the key: `KIND` " + strings.Join(devtoken.Kinds, ", ")},
			&cli.StringFlag{Name: "label", Value: "signagent-dev", Usage: "token and key `LABEL`"},
			cmdutil.Pick(cmdutil.TokenFlags(), "module")[0],
			&cli.BoolFlag{Name: "force", Usage: "discard an existing token in DIR and make a new one (in a directory token dev did not make: replace its files there, saying which)"},
			&cli.BoolFlag{Name: "ec", Usage: "with --key-type rsa2048, also generate a P-256 key labelled LABEL-ec (id 02), for benchmarks"},
		},
		Action: cmdutil.Run(e, readDev, runDev),
	}
}

// devOptions are what dev is told: the token's directory (absolute),
// kind of key and label, the module named (and whether one was), and
// whether an existing token is replaced.
type devOptions struct {
	Dir       string
	Kind      string
	Label     string
	Module    string
	ModuleSet bool
	EC        bool
	Force     bool
}

// readDev reads dev's flags.
func readDev(c *cli.Context) (devOptions, error) {
	o := devOptions{Kind: c.String("key-type"), Label: c.String("label"), Module: c.String("module"), ModuleSet: c.IsSet("module"), EC: c.Bool("ec"), Force: c.Bool("force")}
	kind := o.Kind
	if !slices.Contains(devtoken.Kinds, kind) {
		return o, cmdutil.UsageErr(fmt.Errorf("--key-type %q: want one of %s", kind, strings.Join(devtoken.Kinds, ", ")))
	}
	if o.EC && kind != devtoken.KindRSA {
		return o, cmdutil.UsageErr(fmt.Errorf("--ec adds a P-256 key beside the RSA one; it does not go with --key-type %s", kind))
	}
	dirName := c.String("dir")
	if dirName == "" {
		dirName = defaultDevDir(kind)
	}
	dir, err := filepath.Abs(dirName)
	if err != nil {
		return o, cmdutil.UsageErr(err)
	}
	if strings.ContainsFunc(dir, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return o, cmdutil.UsageErr(fmt.Errorf("--dir %s: a path with a newline or other control character cannot be used (SoftHSM's configuration cannot hold it)", strconv.Quote(dir)))
	}
	o.Dir = dir
	label := o.Label
	if label == "" || len(label) > 32 || strings.ContainsFunc(label, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return o, cmdutil.UsageErr(errors.New("--label must have 1 to 32 printable characters (a PKCS#11 token label)"))
	}
	return o, nil
}

// runDev makes (or reuses) the development token and prints the
// environment that points the other commands at it.
func runDev(_ context.Context, e *cmdutil.Env, o devOptions) error {
	dt := devtoken.Token{Dir: o.Dir, Label: o.Label, Kind: o.Kind, EC: o.EC, Force: o.Force, Log: e.Log}
	if dt.ModulePath() == "" {
		// Not the default list: p11-kit's proxy comes first there, and
		// the development token is SoftHSM's.
		mod, err := resolveModuleFrom(e, o.Module, locate.SoftHSMModules)
		if err != nil {
			return err
		}
		if !strings.Contains(filepath.Base(mod.Path), "softhsm") {
			return cmdutil.UsageErr(fmt.Errorf("token dev needs the SoftHSM module, not %s; install softhsm2 or give --module", mod.Path))
		}
		dt.Module = mod.Path
	} else if o.ModuleSet {
		return cmdutil.UsageErr(fmt.Errorf("--module does not go with --key-type %s: the token is the GOST test module built in DIR", o.Kind))
	}
	reuse, err := dt.Make()
	if err != nil {
		if errors.Is(err, devtoken.ErrForeignDir) || errors.Is(err, devtoken.ErrOtherKind) {
			return cmdutil.UsageErr(err)
		}
		return err
	}
	return dt.WriteEnv(e.Stdout, reuse)
}
