// Package secret asks for a secret on the terminal without echo.
package secret

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

// IsTerminal reports whether f is a terminal one can prompt on.
func IsTerminal(f *os.File) bool { return f != nil && term.IsTerminal(int(f.Fd())) }

// Prompt writes label to out and reads a line from the terminal tty
// without echo. An interrupt while it waits puts the terminal back as it
// was before the process dies, so that the shell is not left without echo.
// An empty answer is an error.
func Prompt(tty *os.File, out io.Writer, label string) ([]byte, error) {
	fd := int(tty.Fd())
	state, err := term.GetState(fd)
	if err != nil {
		return nil, fmt.Errorf("could not read it from the terminal: %w", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	stop := make(chan struct{})
	defer func() { signal.Stop(sigs); close(stop) }()
	go func() {
		select {
		case s := <-sigs:
			_ = term.Restore(fd, state)
			fmt.Fprintln(out)
			signal.Reset(s)
			_ = syscall.Kill(os.Getpid(), s.(syscall.Signal))
		case <-stop:
		}
	}()
	fmt.Fprint(out, label)
	b, err := term.ReadPassword(fd)
	fmt.Fprintln(out)
	if err != nil {
		return nil, fmt.Errorf("could not read it from the terminal: %w", err)
	}
	if len(b) == 0 {
		return nil, errors.New("the answer is empty")
	}
	return b, nil
}
