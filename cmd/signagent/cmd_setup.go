package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/internal/settings"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/signer"
)

// setupKeys are the settings setup asks for, in its order; each is a
// flag of setup (for --non-interactive) and a key of the context it
// writes.
var setupKeys = []string{"space", "base-url", "api-url", "auth-url", "client-id", "client-secret-file",
	"api-key-file", "developer-key-file", "module", "key", "pin-file"}

func setupCommand(e *env) *cli.Command {
	str := func(name, usage string) cli.Flag {
		return &cli.StringFlag{Name: name, Category: "Answers", Usage: usage}
	}
	return &cli.Command{
		Name:  "setup",
		Usage: "write a context of the settings file, asking for each setting and checking it (like step ca bootstrap)",
		Description: "Asks for the space and the addresses, the API key, developer key and client secret files (their\n" +
			"permissions too), the identity provider (its discovery document is fetched), the PKCS#11 token and key\n" +
			"(the module's tokens and certificates are listed to pick from), and tries a signature. Each answer is\n" +
			"checked as it is given; nothing is written until all are valid. The values offered are the context's\n" +
			"current ones. --non-interactive takes the answers from the flags and reports every bad one at once.\n\n" +
			examples("signagent setup --context staging",
				"signagent setup --context ci --non-interactive --space staging --api-url https://api.example --api-key-file key"),
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "non-interactive", Category: "Answers", Usage: "take the answers from the flags; ask nothing"},
			&cli.BoolFlag{Name: "use", Category: "Answers", Usage: "make the context the current one (asked when interactive; default when there is none)"},
			&cli.BoolFlag{Name: "no-signature", Category: "Answers", Usage: "do not try a signature (the PIN may not be at hand)"},
			str("space", "`SPACE`: staging or production"),
			str("base-url", "the trusted authentication address `URL`"),
			str("api-url", "the business API `URL`"),
			str("auth-url", "the identity provider's `URL`"),
			str("client-id", "the application's `CLIENT_ID`"),
			str("client-secret-file", "`FILE` holding the client secret"),
			str("api-key-file", "`FILE` holding the partner API key"),
			str("developer-key-file", "`FILE` holding the developer key"),
			str("module", "the PKCS#11 module `PATH`"),
			str("key", "the signing key's pkcs11: `URI` (interactive: picked from a list)"),
			str("pin-file", "`FILE` holding the token's PIN"),
			&cli.BoolFlag{Name: "insecure-http", Category: "Answers", Usage: "accept plain http addresses beyond loopback (tests)"},
			pick(tokenFlags(), "token-timeout")[0],
		},
		Action: func(c *cli.Context) error { return setup(c, e) },
	}
}

// setupRun is one setup: the answers so far and how to ask.
type setupRun struct {
	c        *cli.Context
	e        *env
	in       *bufio.Reader
	ask      bool
	file     *settings.File
	current  map[string]string // the context's values before, offered
	answers  map[string]string
	problems []string // --non-interactive: every bad answer
}

func setup(c *cli.Context, e *env) error {
	if err := noArgs(c); err != nil {
		return err
	}
	r := &setupRun{c: c, e: e, in: bufio.NewReader(e.stdin), ask: !c.Bool("non-interactive"), answers: map[string]string{}, current: map[string]string{}}
	path, named := settingsPath(c)
	if path == "" {
		return usageErr(errors.New("no settings file: give --config FILE (there is no home directory)"))
	}
	f, err := settings.ReadFile(path, "", named, knownKeys(c.App))
	if err != nil {
		return usageErr(err)
	}
	r.file = f
	name := contextName(c)
	if name == "" && r.ask {
		def := cmp.Or(f.Current, "default")
		if name, err = r.line(fmt.Sprintf("Context name [%s]: ", def)); err != nil {
			return err
		}
		name = cmp.Or(name, def)
	}
	if name == "" {
		return usageErr(errors.New("give the context to write with --context NAME"))
	}
	if slices.Contains(f.Contexts, name) {
		if cur, err := settings.ReadFile(path, name, named, knownKeys(c.App)); err == nil {
			for _, k := range setupKeys {
				if v, ok := cur.Value(k); ok {
					r.current[k] = fmt.Sprint(v)
				}
			}
		}
	}
	fmt.Fprintf(e.stderr, "Setting up context %q in %s (Enter keeps the value in brackets; - clears it).\n", name, path)
	if err := r.answersFor(); err != nil {
		return err
	}
	if len(r.problems) > 0 {
		return usageErr(errors.New(strings.Join(r.problems, "; ")))
	}
	use := c.Bool("use") || f.Current == "" || f.Current == name
	if r.ask && !use {
		a, err := r.line(fmt.Sprintf("Make %q the current context (now %q)? [y/N]: ", name, f.Current))
		if err != nil {
			return err
		}
		use = strings.HasPrefix(strings.ToLower(a), "y")
	}
	return r.write(path, name, use)
}

// line reads one answer (trimmed); the end of the input is an error, not
// an empty answer.
func (r *setupRun) line(prompt string) (string, error) {
	fmt.Fprint(r.e.stderr, prompt)
	s, err := r.in.ReadString('\n')
	if err != nil && (s == "" || !errors.Is(err, io.EOF)) {
		return "", usageErr(errors.New("setup: the input ended before every question was answered (--non-interactive takes the answers from flags)"))
	}
	return strings.TrimSpace(s), nil
}

// answer asks for key (or takes its flag), checks it with check until it
// passes (three tries), and keeps it; "" skips an optional one.
func (r *setupRun) answer(key, question string, optional bool, check func(string) error) (string, error) {
	if !r.ask {
		v := r.c.String(key)
		if v == "" && !optional {
			r.problems = append(r.problems, fmt.Sprintf("--%s: needed", key))
			return "", nil
		}
		if v != "" {
			if err := check(v); err != nil {
				r.problems = append(r.problems, fmt.Sprintf("--%s: %v", key, err))
				return "", nil
			}
			r.answers[key] = v
		}
		return v, nil
	}
	def := cmp.Or(r.c.String(key), r.current[key])
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
			fmt.Fprintln(r.e.stderr, "  needed")
			continue
		}
		if err := check(v); err != nil {
			fmt.Fprintf(r.e.stderr, "  %v\n", err)
			continue
		}
		r.answers[key] = v
		return v, nil
	}
	return "", usageErr(fmt.Errorf("setup: no valid answer for %s after three tries", key))
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
	insecure := r.c.Bool("insecure-http")
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
		{"base-url", "Trusted authentication address (base-url)", true, url},
		{"api-url", "Business API address (api-url)", true, url},
		{"auth-url", "Identity provider address (auth-url)", true, url},
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
	if r.answers["auth-url"] != "" {
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
	client, err := oidc.New(oidc.Config{AuthURL: r.answers["auth-url"], AllowInsecureHTTP: insecure, ClientID: r.answers["client-id"],
		ClientSecret: sec.Value, Space: r.answers["space"], Timeout: 15 * time.Second, Log: r.e.log})
	if err == nil {
		var found bool
		if found, err = client.Discover(r.c.Context); err == nil {
			how := "its discovery document read"
			if !found {
				how = "no discovery document: the /connect/* paths will be used"
			}
			fmt.Fprintf(r.e.stderr, "  identity provider: %s (%s)\n", r.answers["auth-url"], how)
			return nil
		}
	}
	if !r.ask {
		r.problems = append(r.problems, fmt.Sprintf("--auth-url: %v", err))
		return nil
	}
	return fmt.Errorf("setup: the identity provider at %s: %w", r.answers["auth-url"], err)
}

// tokenAnswers picks the signing key: the module's tokens and their
// certificates are listed, one is chosen, and a signature is tried.
func (r *setupRun) tokenAnswers() error {
	mod, err := pkcs11.ResolveModuleFrom(r.c.String("module"), "flag", pkcs11.DefaultModules)
	if err == nil {
		err = pkcs11.Probe(r.c.Context, mod.Path)
	}
	if err != nil {
		if r.c.String("key") != "" || r.c.String("module") != "" {
			r.problems = append(r.problems, fmt.Sprintf("--module: %v", err))
			if r.ask {
				return err
			}
		}
		fmt.Fprintf(r.e.stderr, "  no PKCS#11 module: no signing key is set (%v)\n", err)
		return nil
	}
	if r.c.String("module") != "" {
		r.answers["module"] = mod.Path
	}
	if r.ask {
		if err := r.pickKey(mod.Path); err != nil {
			return err
		}
	} else if k := r.c.String("key"); k != "" {
		if _, err := pkcs11.ParseURI(k); err != nil {
			r.problems = append(r.problems, fmt.Sprintf("--key: %v", err))
		} else {
			r.answers["key"] = k
		}
	}
	if r.answers["key"] == "" {
		return nil
	}
	if _, err := r.answer("pin-file", "File holding the token's PIN (pin-file)", true,
		secretFile("the PIN", pkcs11.PINSecret("").Parse)); err != nil {
		return err
	}
	if len(r.problems) > 0 || r.c.Bool("no-signature") {
		return nil
	}
	return r.trySignature()
}

// pickKey lists the certificates on the module's tokens and asks which
// one's key signs.
func (r *setupRun) pickKey(module string) error {
	tokens, err := pkcs11.ListTokens(r.c.Context, module)
	if err != nil {
		return err
	}
	var uris []string
	for _, t := range tokens {
		if !t.Initialized {
			continue // an empty slot holds no key
		}
		objs, err := pkcs11.ListObjects(r.c.Context, module, pkcs11.TokenSelector{Label: t.Label, Serial: t.Serial}, "")
		if err != nil {
			continue
		}
		for _, o := range objs {
			if o.Class != "certificate" {
				continue
			}
			uris = append(uris, strings.TrimSuffix(pkcs11.ObjectURI(t, o), ";type=cert"))
			fmt.Fprintf(r.e.stderr, "  %d. token %q: %s (%s %d, expires %s, %s)\n", len(uris), t.Label, o.Label, o.KeyType, o.Bits,
				o.NotAfter.Format(time.DateOnly), o.Subject)
		}
	}
	if len(uris) == 0 {
		fmt.Fprintf(r.e.stderr, "  no certificate on the tokens %s sees: no signing key is set\n", module)
		return nil
	}
	_, err = r.answer("key", fmt.Sprintf("Signing key (1-%d, or a pkcs11: URI)", len(uris)), true, func(v string) error {
		if n, err := strconv.Atoi(v); err == nil {
			if n < 1 || n > len(uris) {
				return fmt.Errorf("want 1 to %d", len(uris))
			}
			return nil
		}
		_, err := pkcs11.ParseURI(v)
		return err
	})
	if n, err := strconv.Atoi(r.answers["key"]); err == nil {
		r.answers["key"] = uris[n-1]
	}
	return err
}

// trySignature signs a text for a test credential with the chosen key,
// as sign would, and verifies it; it needs the API key and the PIN.
func (r *setupRun) trySignature() error {
	if r.answers["api-key-file"] == "" {
		fmt.Fprintln(r.e.stderr, "  no API key file: the signature is not tried")
		return nil
	}
	for _, k := range []string{"module", "key", "pin-file", "api-key-file"} {
		if v := r.answers[k]; v != "" {
			if err := r.c.Set(k, v); err != nil {
				return err
			}
		}
	}
	f := newFactory(r.c, r.e)
	defer f.close()
	ctx, cancel := context.WithTimeout(r.c.Context, time.Minute)
	defer cancel()
	err := func() error {
		key, err := apiKey(r.c)
		if err != nil {
			return err
		}
		key2, err := f.openKey(ctx)
		if err != nil {
			return err
		}
		cms := &signer.CMS{Key: key2, Cert: key2.Certificate(), Options: signer.Options{Hash: crypto.SHA256}}
		cred, _ := canonical.Parse(canonical.Phone, "9161234567", canonical.Options{})
		now := canonical.Now()
		text := canonical.Text(key, cred, now)
		der, err := cms.SignText(ctx, text, now)
		if err != nil {
			return err
		}
		if _, err := signer.Verify(der, text, nil); err != nil {
			return fmt.Errorf("the signature does not verify: %w", err)
		}
		fmt.Fprintf(r.e.stderr, "  signature: made on the token and verified (certificate %s)\n", canonical.ThumbprintOf(cms.Cert))
		return nil
	}()
	if err != nil {
		if !r.ask {
			r.problems = append(r.problems, fmt.Sprintf("the signature: %v", err))
			return nil
		}
		return fmt.Errorf("setup: the signature: %w (nothing was written)", err)
	}
	return nil
}

// write puts the answers in the context (the keys setup asks for and not
// answered are removed from it), and makes it current if use.
func (r *setupRun) write(path, name string, use bool) error {
	doc, err := settingsDoc(path)
	if err != nil {
		return err
	}
	m := mapping(mapping(doc.Content[0], "contexts"), name)
	for _, k := range setupKeys {
		if v, ok := r.answers[k]; ok {
			put(m, k, &yaml.Node{Kind: yaml.ScalarNode, Value: v, Tag: "!!str"})
		} else {
			remove(m, k)
		}
	}
	if use {
		put(doc.Content[0], "current-context", &yaml.Node{Kind: yaml.ScalarNode, Value: name, Tag: "!!str"})
	}
	if err := writeSettings(path, doc); err != nil {
		return err
	}
	state := ""
	if use {
		state = ", the current one"
	}
	fmt.Fprintf(r.e.stdout, "Context %s written to %s%s.\n", name, path, state)
	return nil
}
