package cmdutil

import (
	"fmt"
	"io"
	"strings"

	"errors"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/errdefs"
)

// Exit statuses.
const (
	ExitOK          = 0
	ExitFailure     = 1   // anything not below
	ExitBadInput    = 2   // bad input or usage
	ExitRefused     = 3   // the service refused
	ExitTransport   = 4   // the service could not be reached or timed out
	ExitSignIn      = 5   // OpenID Connect: sign in (again): none, refused refresh token, expired device code
	ExitRetry       = 6   // try again in a second: the service saw this signed text already (another process)
	ExitInterrupted = 130 // Ctrl-C
)

// ExitError carries an exit status with an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Exit is err with the exit status code, whatever its kind.
func Exit(code int, err error) error { return &exitError{code, err} }

// UsageErr is err with the bad-input exit status.
func UsageErr(err error) error { return &exitError{ExitBadInput, err} }

// ExitCodes is the one table from an error's kind to the exit status.
var ExitCodes = map[error]int{
	errdefs.ErrInvalidInput:     ExitBadInput,
	errdefs.ErrNotConfigured:    ExitBadInput,
	errdefs.ErrRefused:          ExitRefused,
	errdefs.ErrForbidden:        ExitRefused,
	errdefs.ErrFailing:          ExitTransport, // 5xx or 429 after retries: the service is failing or limiting requests
	errdefs.ErrUnreachable:      ExitTransport,
	errdefs.ErrTimeout:          ExitTransport,
	errdefs.ErrStoreUnavailable: ExitTransport,
	errdefs.ErrStoreFormatNewer: ExitTransport, // a newer agent wrote it: finish the upgrade or roll back, then again
	errdefs.ErrSignIn:           ExitSignIn,
	errdefs.ErrTryAgain:         ExitRetry,
	errdefs.ErrBackoff:          ExitRetry,
	errdefs.ErrTokenNotReady:    ExitFailure,
}

// ExitCode is the exit status for err: the one the command chose, else its
// kind's.
func ExitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if code, ok := ExitCodes[errdefs.Kind(err)]; ok {
		return code
	}
	return ExitFailure
}

// Finish is the exit status of a run of the program name that ended with
// err, which it prints on stderr as one line: a JSON line when the logs
// are JSON (serve in a journal, a log collector), else "name: error".
func Finish(name string, err error, stderr io.Writer) int {
	if err == nil {
		return ExitOK
	}
	code := ExitCode(err)
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	if JSONLogs.Load() {
		log := zerolog.New(stderr).With().Timestamp().Logger()
		log.Error().Int("exit", code).Msg(msg)
		return code
	}
	fmt.Fprintf(stderr, "%s: %s\n", name, msg)
	return code
}
