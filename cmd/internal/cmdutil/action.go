package cmdutil

import (
	"context"

	"github.com/urfave/cli/v2"
)

// Run is the action of a command made of an Options struct, a read and a
// run: read takes the flags (and arguments) into the options, checked,
// and run does the work from the options with what the command is given
// (the factory, or the streams).
func Run[F, O any](with F, read func(*cli.Context) (O, error), run func(context.Context, F, O) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		o, err := read(c)
		if err != nil {
			return err
		}
		return run(c.Context, with, o)
	}
}
