package main

import (
	"encoding/pem"
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
			"its directory with " + devMarker + "), and refuses a non-empty directory it did not make unless --force.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Value: defaultDevDir(), Usage: "`DIR` for the SoftHSM configuration, token and PIN"},
			&cli.StringFlag{Name: "label", Value: "signagent-dev", Usage: "token and key `LABEL`"},
			tokenFlags()[0], // --module
			&cli.BoolFlag{Name: "force", Usage: "discard an existing token in DIR and make a new one (in a directory dev-token did not make: replace its files there, saying which)"},
			&cli.BoolFlag{Name: "ec", Usage: "also generate a P-256 key labelled LABEL-ec (id 02), for benchmarks"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
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
			mod, err := resolveModule(c, e)
			if err != nil {
				return err
			}
			if !strings.Contains(filepath.Base(mod.Path), "softhsm") {
				return usageErr(fmt.Errorf("dev-token needs the SoftHSM module, not %s; install softhsm2 or give --module", mod.Path))
			}
			conf := filepath.Join(dir, "softhsm2.conf")
			pinFile := filepath.Join(dir, "pin")
			reuse, err := claimDevDir(e, dir, c.Bool("force"))
			if err != nil {
				return err
			}
			if !reuse {
				if err := makeDevToken(e, mod.Path, dir, label, c.Bool("ec")); err != nil {
					return err
				}
			}
			what := "made"
			if reuse {
				what = "reused"
			}
			// Every line is safe for eval: the comment holds no newline
			// (strconv.Quote), the values are single-quoted.
			fmt.Fprintf(e.stdout, "# signagent development token %s %s in %s\n", strconv.Quote(label), what, strconv.Quote(dir))
			for _, kv := range [][2]string{
				{softhsm.ConfEnv, conf},
				{pkcs11.ModuleEnv, mod.Path},
				{"SIGNAGENT_TOKEN_LABEL", label},
				{"SIGNAGENT_KEY_LABEL", label},
				{pkcs11.PINFileEnv, pinFile},
			} {
				fmt.Fprintf(e.stdout, "export %s=%s\n", kv[0], shellQuote(kv[1]))
			}
			return nil
		},
	}
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// devMarker marks a directory dev-token made; dev-token removes files only
// in a directory that has it.
const devMarker = ".signagent-dev-token"

// devFiles are what dev-token makes in its directory.
var devFiles = []string{"tokens", "softhsm2.conf", "pin", "so-pin", "cert.pem"}

// claimDevDir decides what to do with dir: reuse the token in it (it is
// ours and complete, and no --force), or make one, after removing what an
// earlier run of ours left. A directory that is not ours and not empty is
// refused unless force, and then what will be replaced is said first.
func claimDevDir(e *env, dir string, force bool) (reuse bool, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return false, writeMarker(dir)
	}
	if err != nil {
		return false, usageErr(fmt.Errorf("could not read %s: %w", dir, err))
	}
	_, merr := os.Lstat(filepath.Join(dir, devMarker))
	ours := merr == nil
	if !ours && !force {
		return false, usageErr(fmt.Errorf("%s is not empty and was not made by dev-token; choose another --dir, or give --force to replace its %s", dir, strings.Join(devFiles, ", ")))
	}
	if _, err := os.Stat(filepath.Join(dir, "pin")); ours && err == nil && !force {
		return true, nil
	}
	var gone []string
	for _, f := range devFiles {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			gone = append(gone, f)
		}
	}
	if len(gone) > 0 {
		e.log.Warn().Str("dir", dir).Strs("removing", gone).Msg("replacing the development token's files")
		for _, f := range gone {
			if err := os.RemoveAll(filepath.Join(dir, f)); err != nil {
				return false, err
			}
		}
	}
	return false, writeMarker(dir)
}

func writeMarker(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("could not create %s: %w", dir, err)
	}
	return os.WriteFile(filepath.Join(dir, devMarker), []byte("made by signagent dev-token; it removes only its own files here\n"), 0o600)
}

// makeDevToken makes the token in dir (claimed by claimDevDir); if making
// it fails, what was made is removed, so that the next run starts clean.
func makeDevToken(e *env, module, dir, label string, withEC bool) (err error) {
	defer func() {
		if err != nil {
			for _, f := range devFiles {
				os.RemoveAll(filepath.Join(dir, f))
			}
		}
	}()
	conf, err := softhsm.WriteConfig(dir)
	if err != nil {
		return err
	}
	// SoftHSM reads its configuration when the module is initialized.
	os.Setenv(softhsm.ConfEnv, conf)
	pin, err := softhsm.RandomPIN(16)
	if err != nil {
		return err
	}
	soPIN, err := softhsm.RandomPIN(16)
	if err != nil {
		return err
	}
	e.log.Info().Str("dir", dir).Str("token", label).Msg("initializing SoftHSM token")
	if _, err := softhsm.InitToken(module, label, soPIN, pin); err != nil {
		return err
	}
	e.log.Info().Str("key", label).Msg("generating RSA-2048 key on the token")
	specs := []softhsm.KeySpec{{Type: softhsm.RSA2048, Label: label, ID: []byte{1}, CommonName: "signagent development key"}}
	if withEC {
		e.log.Info().Str("key", label+"-ec").Msg("generating P-256 key on the token")
		specs = append(specs, softhsm.KeySpec{Type: softhsm.P256, Label: label + "-ec", ID: []byte{2}, CommonName: "signagent development key (P-256)"})
	}
	certs, err := softhsm.GenerateKeys(module, label, pin, specs)
	if err != nil {
		return err
	}
	// The certificate, public, for the emulator to trust and for verify --ca.
	if err := softhsm.WriteFileAtomic(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certs[0].Raw}), 0o644); err != nil {
		return err
	}
	if err := softhsm.WriteFileAtomic(filepath.Join(dir, "so-pin"), []byte(soPIN+"\n"), 0o600); err != nil {
		return err
	}
	// The PIN file is written last: its presence means the token is complete.
	return softhsm.WriteFileAtomic(filepath.Join(dir, "pin"), []byte(pin+"\n"), 0o600)
}
