package setupcmd

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/pkcs11"
)

// setupKeys are the settings setup asks for, in its order; each is a
// flag of setup (for --non-interactive) and a key of the context it
// writes.
var setupKeys = []string{"space", "trusted-url", "business-url", "oidc-url", "client-id", "client-secret-file",
	"api-key-file", "developer-key-file", "module", "softhsm2-conf", "key", "certificate-file", "pin-file"}

// setupVars are the variables the other commands read for setup's keys:
// setup offers their values (and --non-interactive takes them), so that
// what works in this shell is what the context keeps.
var setupVars = map[string]string{
	"space": "SIGNAGENT_SPACE", "trusted-url": "SIGNAGENT_TRUSTED_URL", "business-url": "SIGNAGENT_BUSINESS_URL",
	"oidc-url": "SIGNAGENT_OIDC_URL", "client-id": "SIGNAGENT_CLIENT_ID",
	"client-secret-file": cmdutil.ClientSecretSpec.Env + "_FILE", "api-key-file": cmdutil.APIKeySpec.Env + "_FILE",
	"developer-key-file": cmdutil.DeveloperKeySpec.Env + "_FILE", "module": pkcs11.ModuleEnv,
	"softhsm2-conf": settings.EnvKeys["softhsm2-conf"], "key": "SIGNAGENT_KEY_URI", "pin-file": cmdutil.PINSpec.Env + "_FILE",
}

// setupPaths are the keys that name a file: kept as absolute paths, as
// kubectl config set-cluster keeps a certificate's, so that the context
// works from any directory (a relative path would name another file in
// each one); a leading ~/ is this user's home, which a prompt's answer and
// a --flag=~/x do not get from the shell.
var setupPaths = []string{"client-secret-file", "api-key-file", "developer-key-file", "module", "softhsm2-conf", "pin-file", "certificate-file"}

func setupCommand(f *factory.Factory) *cli.Command {
	str := func(name, usage string) cli.Flag {
		return &cli.StringFlag{Name: name, Category: "Answers", EnvVars: []string{setupVars[name]}, Usage: usage}
	}
	return &cli.Command{
		Name:  "setup",
		Usage: "write a context of the settings file, asking for each setting and checking it (like step ca bootstrap)",
		Description: "Asks for the space and the addresses, the API key, developer key and client secret files (their\n" +
			"permissions too), the identity provider (its discovery document is fetched), the PKCS#11 token and key\n" +
			"(the module's tokens and certificates are listed to pick from, each key by a URI with the token's serial,\n" +
			"so that no other card of the same label is taken), and tries a signature. Each answer is\n" +
			"checked as it is given; nothing is written until all are valid. The values offered are the flags' and\n" +
			"variables' (SIGNAGENT_PIN_FILE, ... as after eval \"$(signagent token dev)\"), else the context's.\n" +
			"Files are kept as absolute paths, and SoftHSM's configuration file with a SoftHSM module, so that the\n" +
			"context works from any directory with no variable set, for every command and the per-user agent.\n" +
			"--non-interactive takes the answers from the flags and variables and reports every bad one at once.\n\n" +
			cmdutil.Examples("signagent setup --context staging",
				"signagent setup --context ci --non-interactive --space staging --business-url https://api.example --api-key-file key",
				"signagent setup --context ci --non-interactive --module /usr/lib/x86_64-linux-gnu/opensc-pkcs11.so --key 'pkcs11:token=partner;serial=0123456789abcdef;object=signing' --pin-file pin"),
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "non-interactive", Category: "Answers", Usage: "take the answers from the flags; ask nothing"},
			&cli.BoolFlag{Name: "use", Category: "Answers", Usage: "make the context the current one (asked when interactive; default when there is none)"},
			&cli.BoolFlag{Name: "no-signature", Category: "Answers", Usage: "do not try a signature (the PIN may not be at hand)"},
			str("space", "`SPACE`: staging or production"),
			str("trusted-url", "the trusted authentication address `URL`"),
			str("business-url", "the business API `URL`"),
			str("oidc-url", "the identity provider's `URL`"),
			str("client-id", "the application's `CLIENT_ID`"),
			str("client-secret-file", "`FILE` holding the client secret"),
			str("api-key-file", "`FILE` holding the partner API key"),
			str("developer-key-file", "`FILE` holding the developer key"),
			str("module", "the PKCS#11 module `PATH`"),
			str("softhsm2-conf", "SoftHSM's configuration `FILE`, which says where its tokens are (with a SoftHSM module)"),
			str("key", "the signing key's pkcs11: `URI` (interactive: picked from a list)"),
			str("pin-file", "`FILE` holding the token's PIN"),
			str("certificate-file", "the key's certificate `PATH` (PEM or DER), asked when the token shows none for the key"),
			&cli.BoolFlag{Name: "insecure-http", Category: "Answers", Usage: "accept plain http addresses beyond loopback (tests)"},
			cmdutil.Pick(cmdutil.TokenFlags(), "token-timeout")[0],
		},
		Action: cmdutil.Run(f, readSetup, runSetup),
	}
}

// setupOptions are what setup is told: the answers the flags and
// variables give (every one of setupKeys, "" when not given), its
// switches, the settings file and the context named.
type setupOptions struct {
	Given          map[string]string
	NonInteractive bool
	Use            bool
	NoSignature    bool
	InsecureHTTP   bool
	Path           string
	Named          bool
	Context        string
	Known          func(string) bool
	// Set gives one of setup's flags a value: the answers the factory
	// opens the key with (and reads the API key from) for the signature
	// tried.
	Set func(name, value string) error
}

// readSetup reads setup's flags.
func readSetup(c *cli.Context) (setupOptions, error) {
	if err := cmdutil.NoArgs(c); err != nil {
		return setupOptions{}, err
	}
	o := setupOptions{Given: map[string]string{}, NonInteractive: c.Bool("non-interactive"), Use: c.Bool("use"), NoSignature: c.Bool("no-signature"),
		InsecureHTTP: c.Bool("insecure-http"), Context: cmdutil.ContextName(c), Known: cmdutil.KnownKeys(c.App), Set: c.Set}
	for _, k := range setupKeys {
		o.Given[k] = c.String(k)
	}
	o.Path, o.Named = cmdutil.SettingsPath(c)
	return o, nil
}

// setupRun is one setup: the answers so far and how to ask.
type setupRun struct {
	ctx      context.Context
	o        setupOptions
	e        *cmdutil.Env
	f        *factory.Factory // the run's: the key is opened once, closed when setup ends
	in       *bufio.Reader
	ask      bool
	file     *settings.File
	current  map[string]string // the context's values before, offered
	found    map[string]string // values found otherwise (the module in the usual places), offered last
	answers  map[string]string
	problems []string // --non-interactive: every bad answer
}

// runSetup asks for (or takes) each answer, checks it, and writes the
// context when all are valid.
func runSetup(ctx context.Context, fac *factory.Factory, o setupOptions) error {
	e := fac.Env
	r := &setupRun{ctx: ctx, o: o, e: e, f: fac, in: bufio.NewReader(e.Stdin), ask: !o.NonInteractive, answers: map[string]string{}, current: map[string]string{}, found: map[string]string{}}
	path, named := o.Path, o.Named
	if path == "" {
		return cmdutil.UsageErr(errors.New("no settings file: give --config FILE (there is no home directory)"))
	}
	f, err := settings.ReadFile(path, "", named, o.Known)
	if err != nil {
		return cmdutil.UsageErr(err)
	}
	r.file = f
	name := o.Context
	if name == "" && r.ask {
		def := cmp.Or(f.Current, "default")
		if name, err = r.line(fmt.Sprintf("Context name [%s]: ", def)); err != nil {
			return err
		}
		name = cmp.Or(name, def)
	}
	if name == "" {
		return cmdutil.UsageErr(errors.New("give the context to write with --context NAME"))
	}
	if slices.Contains(f.Contexts, name) {
		if cur, err := settings.ReadFile(path, name, named, o.Known); err == nil {
			for _, k := range setupKeys {
				if v, ok := cur.Value(k); ok {
					r.current[k] = fmt.Sprint(v)
				}
			}
		}
	}
	fmt.Fprintf(e.Stderr, "Setting up context %q in %s (Enter keeps the value in brackets; - clears it).\n", name, path)
	if err := r.answersFor(); err != nil {
		return err
	}
	if len(r.problems) > 0 {
		return cmdutil.UsageErr(errors.New(strings.Join(r.problems, "; ")))
	}
	use := o.Use || f.Current == "" || f.Current == name
	if r.ask && !use {
		a, err := r.line(fmt.Sprintf("Make %q the current context (now %q)? [y/N]: ", name, f.Current))
		if err != nil {
			return err
		}
		use = strings.HasPrefix(strings.ToLower(a), "y")
	}
	return r.write(path, name, use)
}

// set gives the flag name the value v, as if given: the answers the
// factory builds from.
func (r *setupRun) set(name, v string) error {
	r.o.Given[name] = v
	return r.o.Set(name, v)
}

// line reads one answer (trimmed); the end of the input is an error, not
// an empty answer.
func (r *setupRun) line(prompt string) (string, error) {
	fmt.Fprint(r.e.Stderr, prompt)
	s, err := r.in.ReadString('\n')
	if err != nil && (s == "" || !errors.Is(err, io.EOF)) {
		return "", cmdutil.UsageErr(errors.New("setup: the input ended before every question was answered (--non-interactive takes the answers from flags)"))
	}
	return strings.TrimSpace(s), nil
}

// answer asks for key (or takes its flag or variable), checks it with
// check until it passes (three tries), and keeps it; "" skips an optional
// one. A file's path is made absolute first, and said when it changed.
func (r *setupRun) answer(key, question string, optional bool, check func(string) error) (string, error) {
	keep := func(v string) error {
		if slices.Contains(setupPaths, key) {
			abs, err := absPath(v)
			if err != nil {
				return err
			}
			if abs != v {
				fmt.Fprintf(r.e.Stderr, "  %s: %s\n", key, abs)
			}
			v = abs
		}
		if err := check(v); err != nil {
			return err
		}
		r.answers[key] = v
		return nil
	}
	if !r.ask {
		v := r.o.Given[key]
		if v == "" && !optional {
			r.problems = append(r.problems, fmt.Sprintf("--%s: needed", key))
			return "", nil
		}
		if v != "" {
			if err := keep(v); err != nil {
				r.problems = append(r.problems, fmt.Sprintf("--%s: %v", key, err))
				return "", nil
			}
		}
		return r.answers[key], nil
	}
	def := cmp.Or(r.o.Given[key], r.current[key], r.found[key])
	for try := 0; try < 3; try++ {
		prompt := question
		if def != "" {
			prompt += " [" + def + "]"
		} else if optional {
			prompt += " (Enter to skip)"
		}
		v, err := r.line(prompt + ": ")
		if err != nil {
			return "", err
		}
		switch {
		case v == "-":
			v = ""
		case v == "":
			v = def
		}
		if v == "" {
			if optional {
				delete(r.answers, key)
				return "", nil
			}
			fmt.Fprintln(r.e.Stderr, "  needed")
			continue
		}
		if err := keep(v); err != nil {
			fmt.Fprintf(r.e.Stderr, "  %v\n", err)
			continue
		}
		return r.answers[key], nil
	}
	return "", cmdutil.UsageErr(fmt.Errorf("setup: no valid answer for %s after three tries", key))
}

// absPath is path made absolute against the working directory, a leading
// ~/ being the home directory.
func absPath(path string) (string, error) {
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("%s: no home directory for ~/: %w", path, err)
		}
		path = filepath.Join(home, rest)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return abs, nil
}

// secretFile checks a secret's file as every command reads it: this
// user's, not readable by others, a well-formed value.
func secretFile(what string, parse func(string) (string, error)) func(string) error {
	return func(path string) error {
		_, err := secret.Source{What: what, File: path, Flag: "the file", Parse: parse}.Resolve()
		return err
	}
}

func (r *setupRun) answersFor() error {
	insecure := r.o.InsecureHTTP
	url := func(v string) error { _, err := httpx.ParseBaseURL(v, insecure); return err }
	steps := []struct {
		key, question string
		optional      bool
		check         func(string) error
	}{
		{"space", "Space of the service (staging or production)", false, func(v string) error {
			if v != oidc.SpaceStaging && v != oidc.SpaceProduction {
				return errors.New("want staging or production")
			}
			return nil
		}},
		{"trusted-url", "Trusted authentication address (trusted-url)", true, url},
		{"business-url", "Business API address (business-url)", true, url},
		{"oidc-url", "Identity provider address (oidc-url)", true, url},
	}
	for _, s := range steps {
		if _, err := r.answer(s.key, s.question, s.optional, s.check); err != nil {
			return err
		}
	}
	if _, err := r.answer("api-key-file", "File holding the partner API key (api-key-file)", true,
		secretFile("the API key", canonical.NormalizeAPIKey)); err != nil {
		return err
	}
	if _, err := r.answer("developer-key-file", "File holding the developer key (developer-key-file)", true,
		secretFile("the developer key", legacy.CheckDeveloperKey)); err != nil {
		return err
	}
	if r.answers["oidc-url"] != "" {
		if err := r.oidcAnswers(insecure); err != nil {
			return err
		}
	}
	return r.tokenAnswers()
}

// oidcAnswers asks for the client and checks the provider: its discovery
// document is fetched.
func (r *setupRun) oidcAnswers(insecure bool) error {
	if _, err := r.answer("client-id", "The application's client_id (client-id)", false, func(v string) error {
		if strings.ContainsFunc(v, func(c rune) bool { return c <= ' ' }) {
			return errors.New("a client_id has no space or control character")
		}
		return nil
	}); err != nil {
		return err
	}
	if _, err := r.answer("client-secret-file", "File holding the client secret (client-secret-file)", false,
		secretFile("the client secret", oidc.CheckSecret)); err != nil {
		return err
	}
	if r.answers["client-id"] == "" || r.answers["client-secret-file"] == "" {
		return nil
	}
	sec, _ := secret.Source{What: "the client secret", File: r.answers["client-secret-file"], Parse: oidc.CheckSecret}.Resolve()
	client, err := oidc.New(oidc.Config{AuthURL: r.answers["oidc-url"], AllowInsecureHTTP: insecure, ClientID: r.answers["client-id"],
		ClientSecret: sec.Value, Space: r.answers["space"], Timeout: 15 * time.Second, Log: r.e.Log})
	if err == nil {
		var found bool
		if found, err = client.Discover(r.ctx); err == nil {
			how := "its discovery document read"
			if !found {
				how = "no discovery document: the /connect/* paths will be used"
			}
			fmt.Fprintf(r.e.Stderr, "  identity provider: %s (%s)\n", r.answers["oidc-url"], how)
			return nil
		}
	}
	if !r.ask {
		r.problems = append(r.problems, fmt.Sprintf("--oidc-url: %v", err))
		return nil
	}
	return fmt.Errorf("setup: the identity provider at %s: %w", r.answers["oidc-url"], err)
}

// write puts the answers in the context (the keys setup asks for and not
// answered are removed from it), and makes it current if use.
func (r *setupRun) write(path, name string, use bool) error {
	doc, err := settings.EditDoc(path)
	if err != nil {
		return err
	}
	m := settings.Mapping(settings.Mapping(doc.Content[0], "contexts"), name)
	for _, k := range setupKeys {
		if v, ok := r.answers[k]; ok {
			settings.Put(m, k, &yaml.Node{Kind: yaml.ScalarNode, Value: v, Tag: "!!str"})
		} else {
			settings.Remove(m, k)
		}
	}
	if use {
		settings.Put(doc.Content[0], "current-context", &yaml.Node{Kind: yaml.ScalarNode, Value: name, Tag: "!!str"})
	}
	if err := settings.WriteDoc(path, doc); err != nil {
		return err
	}
	state := ""
	if use {
		state = ", the current one"
	}
	fmt.Fprintf(r.e.Stdout, "Context %s written to %s%s.\n", name, path, state)
	return nil
}
