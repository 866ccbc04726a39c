package cmdutil

import "github.com/urfave/cli/v2"

// FlagName is a flag's name (the first of Names), read from the flag's
// own field. urfave/cli's Names runs a regexp over the name and each
// alias on every call (it strips a v1-style "name, alias" spelling, which
// no flag here uses), and building the command line called it thousands
// of times at every start: a third of a start's CPU, several times that
// under the race detector. TestFlagNamesAsCLI holds it to Names.
func FlagName(fl cli.Flag) string {
	if n, _, ok := fieldNames(fl); ok {
		return n
	}
	return fl.Names()[0]
}

// FlagNames is a flag's name and then its aliases, as Names (see
// FlagName).
func FlagNames(fl cli.Flag) []string {
	if n, aliases, ok := fieldNames(fl); ok {
		return append([]string{n}, aliases...)
	}
	return fl.Names()
}

func fieldNames(fl cli.Flag) (string, []string, bool) {
	switch f := fl.(type) {
	case *cli.StringFlag:
		return f.Name, f.Aliases, true
	case *cli.BoolFlag:
		return f.Name, f.Aliases, true
	case *cli.IntFlag:
		return f.Name, f.Aliases, true
	case *cli.DurationFlag:
		return f.Name, f.Aliases, true
	case *cli.StringSliceFlag:
		return f.Name, f.Aliases, true
	}
	return "", nil, false
}
