package cmdutil

import "github.com/urfave/cli/v2"

// A Family is the commands of one job: under Category in the root help,
// at the top level or under the family's noun (signagent oidc login), as
// the app's tree places them. Each command says what the wiring in main must know of
// it in its own cli.Command (Args: it takes positional arguments and
// checks them itself; without it, any is refused) and in Settings.
type Family struct {
	Category string
	Commands []Command
}

// Command is a command of a family and how it reads the settings file.
type Command struct {
	*cli.Command
	Settings SettingsUse
}

// SettingsUse is how a command reads the settings file.
type SettingsUse int

const (
	// ApplySettings: the file's values become the values of the flags
	// not given (most commands).
	ApplySettings SettingsUse = iota
	// NoSettings: the file is not read (config edits it; version,
	// completion and man need none).
	NoSettings
	// OwnSettings: serve's --config is its own, read by itself, again on
	// SIGHUP.
	OwnSettings
	// OfferSettings: setup offers the file's values, and the --context it
	// is given names the context it makes.
	OfferSettings
)
