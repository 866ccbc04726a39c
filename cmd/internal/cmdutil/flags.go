package cmdutil

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

const (
	catToken = "Token"
	// CatCredential heads the credential flags (--phone, --snils, ...).
	CatCredential = "Credential"
	// CatService heads the trusted service's flags.
	CatService = "Service"
	// CatOutput heads the flags that shape what a command writes.
	CatOutput = "Output"
)

// TokenFlags select the module, token, key and certificate. There is no flag
// for the PIN itself: argv is visible to every user of the machine.
func TokenFlags() []cli.Flag {
	return []cli.Flag{
		// The module flag has no EnvVars so that the log can say whether the
		// module came from the flag, SIGNAGENT_PKCS11_MODULE or a default place.
		&cli.StringFlag{Name: "module", Category: catToken, Usage: "PKCS#11 module `PATH` (default: $SIGNAGENT_PKCS11_MODULE, then p11-kit-proxy, then SoftHSM, in the usual places)"},
		&cli.StringFlag{Name: "token-label", Category: catToken, EnvVars: []string{"SIGNAGENT_TOKEN_LABEL"}, Usage: "choose the token by `LABEL`"},
		&cli.StringFlag{Name: "token-serial", Category: catToken, EnvVars: []string{"SIGNAGENT_TOKEN_SERIAL"}, Usage: "choose the token by `SERIAL`"},
		&cli.StringFlag{Name: "key", Category: catToken, EnvVars: []string{"SIGNAGENT_KEY_URI"}, Usage: "RFC 7512 pkcs11: `URI` of the key (token=, serial=, slot-id=, object=, id=, module-path=, module-name=, pin-source=)"},
		&cli.StringFlag{Name: "key-label", Category: catToken, EnvVars: []string{"SIGNAGENT_KEY_LABEL"}, Usage: "choose the key by `LABEL`"},
		&cli.StringFlag{Name: "key-id", Category: catToken, EnvVars: []string{"SIGNAGENT_KEY_ID"}, Usage: "choose the key by CKA_ID in `HEX`"},
		&cli.StringFlag{Name: "certificate-file", Category: catToken, EnvVars: []string{"SIGNAGENT_CERTIFICATE_FILE"}, Usage: "the key's certificate from `PATH` (PEM or DER) instead of the token's (a token may show none, as OpenSC's GOST cards)"},
		PINSpec.FlagWith(catToken, ", else a prompt on a terminal"),
		&cli.BoolFlag{Name: "allow-final-pin-try", Category: catToken, Usage: "log in even when the token says one more wrong PIN locks it"},
		&cli.DurationFlag{Name: "token-timeout", Category: catToken, Value: 30 * time.Second, EnvVars: []string{"SIGNAGENT_TOKEN_TIMEOUT"}, Usage: "give up on opening the token, and on each token operation, after `DURATION`"},
	}
}

// Pick returns the flags of all with the given names, in the order named,
// so that a command takes some of a group by name rather than by position
// (a flag added to the group must not shift another command's flags). An
// unknown name is a programming error: every command is built by the tests.
func Pick(all []cli.Flag, names ...string) []cli.Flag {
	byName := make(map[string]cli.Flag, len(all))
	for _, f := range all {
		byName[FlagName(f)] = f
	}
	out := make([]cli.Flag, 0, len(names))
	for _, n := range names {
		f, ok := byName[n]
		if !ok {
			panic("no flag --" + n)
		}
		out = append(out, f)
	}
	return out
}

// Selection is the token and key the command's settings select, a PIN
// prompt allowed (see SelectionFrom).
func Selection(c *cli.Context) (pkcs11.Selection, error) {
	return SelectionFrom(settings.Of(c), true)
}

// SelectionFrom reads the token flags; prompt allows asking for the PIN on
// a terminal (never in the daemon).
func SelectionFrom(c *settings.Settings, prompt bool) (pkcs11.Selection, error) {
	sel := pkcs11.Selection{
		Module:        c.String("module"),
		Token:         tokeninfo.TokenSelector{Label: c.String("token-label"), Serial: c.String("token-serial")},
		URI:           c.String("key"),
		KeyLabel:      c.String("key-label"),
		CertFile:      c.String("certificate-file"),
		Timeout:       c.Duration("token-timeout"),
		AllowFinalTry: c.Bool("allow-final-pin-try"),
	}
	sel.PIN.File, _ = c.Place(PINSpec.flag) // the flag's file; the URI's pin-source is merged below
	if id := c.String("key-id"); id != "" {
		b, err := pkcs11.ParseKeyID(id)
		if err != nil {
			return sel, err
		}
		sel.KeyID = b
	}
	if err := c.Err(); err != nil {
		return sel, err
	}
	// The URI's attributes (module-name, slot-id, pin-source, ...) are
	// merged now, before the PIN is read: its pin-source is the PIN's file
	// as --pin-file is (naming both differently is an error).
	sel, err := sel.Complete()
	if err != nil {
		return sel, err
	}
	pin := PINSource(c, prompt, sel.Token.Label)
	// A command that would prompt lets a reader's keypad stand in.
	sel.PIN.PadWhenMissing = prompt && !pin.Given()
	sel.PIN.Lookup = func(file string) (secret.Secret, error) {
		src := pin
		if file != src.File {
			src.File, src.Flag = file, "the key URI's pin-source"
		}
		return src.Resolve()
	}
	return sel, nil
}

// CredentialFlags name the user whose text is signed: one of --phone,
// --snils or --thumbprint, and the signed text's --timestamp.
func CredentialFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "phone", Category: CatCredential, Usage: "the user's 10-digit `PHONE` (+7, 7 or 8 prefix, spaces, dashes and parentheses allowed)"},
		&cli.StringFlag{Name: "snils", Category: CatCredential, Usage: "the user's 11-digit `SNILS` (XXX-XXX-XXX YY or plain)"},
		&cli.StringFlag{Name: "thumbprint", Category: CatCredential, Usage: "SHA-1 certificate `THUMBPRINT` (40 hex digits, any case, spaces or colons allowed)"},
		&cli.BoolFlag{Name: "legacy-snils", Category: CatCredential, Usage: "accept a SNILS whose check number does not follow the published rule"},
		&cli.StringFlag{Name: "timestamp", Category: CatCredential, Usage: "the text's timestamp, `\"dd.MM.yyyy HH:mm:ss\"` in UTC (default: now)"},
	}
}

// Credential is the one credential the flags give, checked and
// normalized.
func Credential(c *cli.Context) (canonical.Credential, error) {
	var given []canonical.Kind
	var value string
	for _, k := range []canonical.Kind{canonical.Phone, canonical.SNILS, canonical.Thumbprint} {
		if c.IsSet(k.String()) {
			given = append(given, k)
			value = c.String(k.String())
		}
	}
	switch len(given) {
	case 0:
		return canonical.Credential{}, fmt.Errorf("%w: give one of --phone, --snils or --thumbprint", canonical.ErrInvalidCredential)
	case 1:
	default:
		return canonical.Credential{}, fmt.Errorf("%w: give only one of --phone, --snils or --thumbprint", canonical.ErrInvalidCredential)
	}
	return canonical.Parse(given[0], value, canonical.Options{AllowLegacySNILS: c.Bool("legacy-snils")})
}

// Timestamp is --timestamp, else now (canonical.Now).
func Timestamp(c *cli.Context) (time.Time, error) {
	if s := c.String("timestamp"); c.IsSet("timestamp") {
		return canonical.ParseTimestamp(s)
	}
	return canonical.Now(), nil
}

// APIKeyFlags name the partner's API key file (never the key itself).
func APIKeyFlags() []cli.Flag {
	return []cli.Flag{APIKeySpec.FlagWith(CatService, "")}
}

// APIKey returns the partner's API key (see secretSpec for the order of
// its sources). It never comes from argv.
func APIKey(c *cli.Context) (string, error) { return APIKeyFrom(settings.Of(c)) }

// APIKeyFrom reads the API key from its sources in c's settings,
// checked.
func APIKeyFrom(c *settings.Settings) (string, error) {
	return APIKeySpec.Read(c, canonical.NormalizeAPIKey, canonical.ErrInvalidAPIKey)
}

// Examples is a command's help section of examples, one command a line.
func Examples(lines ...string) string {
	return "Examples:\n\n   " + strings.Join(lines, "\n   ")
}

// SecretOutput is the help's warning of a command that prints a secret.
func SecretOutput(what string) string {
	return "It prints " + what + ": a secret, to treat as a password (not in logs, shared files, shell history\n" +
		"or another command's arguments; pass it through a pipe, a variable or a file of mode 0600).\n\n"
}

// JSONFlag is --json, printing the shape named.
func JSONFlag(shape string) cli.Flag {
	return &cli.BoolFlag{Name: "json", Category: CatOutput, Usage: "print " + shape + " as JSON (times in RFC 3339, UTC)"}
}

// NoArgs refuses stray positional arguments, which are most often a value
// given to the wrong flag. The argument is not echoed: it may be a secret
// typed in the wrong place.
//
// In a command with subcommands (token check), a word close to one of
// their names is taken as that name mistyped, and named.
func NoArgs(c *cli.Context) error {
	if c.NArg() > 0 && c.Command != nil && Suggest(c.Args().First(), CommandNames(c.Command.Subcommands)) != "" {
		return notASubcommand(c, c.Args().First())
	}
	if c.NArg() > 0 {
		return UsageErr(errors.New("this command takes no positional arguments (a value given without its --flag?); see --help"))
	}
	return nil
}
