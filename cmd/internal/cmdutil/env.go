package cmdutil

import (
	"io"

	"github.com/rs/zerolog"
)

// Env holds what every command shares: streams and the logger.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Log    zerolog.Logger
}
