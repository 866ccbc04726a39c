package app

import (
	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/cmd/signagent/internal/agentcmd"
	"github.com/signagent/signagent/cmd/signagent/internal/configcmd"
	"github.com/signagent/signagent/cmd/signagent/internal/doctorcmd"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
	"github.com/signagent/signagent/cmd/signagent/internal/legacycmd"
	"github.com/signagent/signagent/cmd/signagent/internal/oidccmd"
	"github.com/signagent/signagent/cmd/signagent/internal/setupcmd"
	"github.com/signagent/signagent/cmd/signagent/internal/tokencmd"
	"github.com/signagent/signagent/cmd/signagent/internal/trustedcmd"
)

// The grammar is gh's and kubectl's: a noun, then a verb (signagent oidc
// login, signagent token list). A scheme's steps go under the scheme's
// name; the PKCS#11 token's commands under token. The root help lists
// 15 commands.

// The root help's categories (urfave sorts them by name: they are named
// to read in this order).
const (
	catSchemes = "Authentication schemes"
	catCalls   = "Business calls"
)

// A branch is a family's place in the tree: its commands at the top, or
// under a noun, the spelling each had before the nouns (kept as a hidden
// command for one release) and those kept at the top in another category.
type branch struct {
	family func(*factory.Factory) cmdutil.Family
	// noun is the command the family's commands go under ("": the top
	// level). It is made, with usage, unless a command of another family
	// has its name (config).
	noun, usage string
	// examples are the noun's help's examples.
	examples []string
	// top are the family's commands kept at the top level, each with its
	// category.
	top map[string]string
	// old is each command's top-level spelling before this release.
	old map[string]string
}

// tree is signagent's commands in the order the root help lists them
// within a category.
var tree = []branch{
	{family: trustedcmd.Family, noun: "trusted", usage: "auth.sid by trusted authentication: the signed text, its signature and its check, linking a user, the session",
		examples: []string{"signagent trusted session --phone 9161234567 --service-user-id crm-42", "signagent trusted sign --phone 9161234567 --out sig.der"},
		old:      map[string]string{"canonical": "canonical", "sign": "sign", "verify": "verify", "link": "link", "session": "session"}},
	{family: legacycmd.Family, noun: "legacy", usage: "the legacy scheme: its authorization token (Authenticate V3) by password, certificate or auth.sid",
		examples: []string{"signagent legacy token --by certificate", "signagent legacy token --by password --login alice --password-file pw"},
		top:      map[string]string{"header": catCalls, "api": catCalls},
		old:      map[string]string{"token": "legacy-token"}},
	{family: oidccmd.Family, noun: "oidc", usage: "OpenID Connect sign-in: log in and out, the profile's status and access token",
		examples: []string{"signagent oidc login", "signagent oidc status", "signagent oidc token"},
		// `token` alone is now the PKCS#11 noun: for this release it still
		// prints the access token (tokenNoun), so it has no hidden command.
		old: map[string]string{"login": "login", "logout": "logout", "status": "status"}},
	{family: agentcmd.Family},
	{family: tokencmd.Family, noun: "token", usage: "PKCS#11 tokens: list them and their keys, check one on what signagent needs, make a development token",
		examples: []string{"signagent token list", "signagent token keys --token-label partner", "signagent token check --json"},
		old:      map[string]string{"list": "tokens", "keys": "keys", "dev": "dev-token"}},
	{family: setupcmd.Family},
	{family: configcmd.Family},
	// doctor is the operator's first command when something is wrong (the
	// runbook's, issue 46's name): it stays at the top, and verify, the
	// other half of `trusted sign`, goes under trusted, so that the root
	// help stays at 15 commands.
	{family: doctorcmd.Family},
}

// placed is a command of the tree to wire and how it reads the settings
// file; for an old spelling, its new one.
type placed struct {
	cmd      *cli.Command
	use      cmdutil.SettingsUse
	old, now string
}

// commands are the tree's top-level commands, the hidden old spellings
// last, and every command to wire (the top-level ones and those under a
// noun) with its use of the settings file.
func commands(fac *factory.Factory) (top []*cli.Command, wired []placed) {
	nouns := map[string]*cli.Command{}
	var hidden []*cli.Command
	for _, b := range tree {
		f := b.family(fac)
		var again map[string]cmdutil.Command // a second build, for the old spellings
		if len(b.old) > 0 {
			again = map[string]cmdutil.Command{}
			for _, c := range b.family(fac).Commands {
				again[c.Name] = c
			}
		}
		for _, c := range f.Commands {
			wired = append(wired, placed{cmd: c.Command, use: c.Settings})
			if cat, ok := b.top[c.Name]; ok || b.noun == "" {
				if ok {
					c.Category = cat
				} else {
					c.Category = f.Category
				}
				top = append(top, c.Command)
				if c.Name == "config" {
					nouns["config"] = c.Command
				}
				continue
			}
			n := nouns[b.noun]
			if n == nil {
				// Args: its subcommands are its arguments (wire's action
				// names the one meant of a word that is none).
				n = &cli.Command{Name: b.noun, Usage: b.usage, Description: cmdutil.Examples(b.examples...), Category: f.Category, HideHelpCommand: true, Args: true}
				nouns[b.noun] = n
				top = append(top, n)
				if b.noun != "token" { // token reads settings for the access token it prints alone
					wired = append(wired, placed{cmd: n, use: cmdutil.NoSettings})
				}
			}
			n.Subcommands = append(n.Subcommands, c.Command)
			if old, ok := b.old[c.Name]; ok {
				alias := again[c.Name]
				alias.Name, alias.Hidden, alias.Category = old, true, ""
				hidden = append(hidden, alias.Command)
				wired = append(wired, placed{cmd: alias.Command, use: alias.Settings, old: old, now: "signagent " + b.noun + " " + c.Name})
			}
		}
	}
	t, printer := nouns["token"], oidcToken(fac)
	cmdutil.HideFlags(printer.Flags)
	t.Flags, t.Action = printer.Flags, tokenNoun(printer.Action)
	wired = append(wired, placed{cmd: t, use: cmdutil.ApplySettings, old: "token", now: "signagent oidc token"})
	return append(top, hidden...), wired
}

// oidcToken is a new build of `signagent oidc token`.
func oidcToken(f *factory.Factory) *cli.Command {
	for _, c := range oidccmd.Family(f).Commands {
		if c.Name == "token" {
			return c.Command
		}
	}
	panic("no oidc token command")
}

// tokenNoun is `signagent token`'s action: given no subcommand, for this
// release, the OpenID Connect access token it printed before the nouns
// (with its flags, hidden), with the line naming `signagent oidc token`;
// given a word that is no subcommand, one line naming the one meant.
func tokenNoun(printToken cli.ActionFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.Args().Present() {
			return cmdutil.UnknownSubcommand(c)
		}
		return printToken(c)
	}
}

// sayOld makes cmd, an old spelling, write the line naming the new one
// before anything else it does. The token noun says it only given no
// subcommand (then it is the old `signagent token`), and only then reads
// the settings (a subcommand reads them itself).
func sayOld(cmd *cli.Command, old, now string) {
	before := cmd.Before
	cmd.Before = func(c *cli.Context) error {
		if cmd.Name == "token" && c.Args().Present() {
			return nil
		}
		settings.SayRenamed(c.App.ErrWriter, old, now)
		return before(c)
	}
}

// oldSpellings are the top-level names of commands before the nouns, each
// with its path now (session: trusted session).
func oldSpellings() map[string]string {
	out := map[string]string{}
	for _, b := range tree {
		for now, old := range b.old {
			out[old] = b.noun + " " + now
		}
	}
	return out
}
