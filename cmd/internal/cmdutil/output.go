package cmdutil

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/safefile"
	"github.com/signagent/signagent/signer"
)

// JSONTime is the one time format of the JSON signagent prints, the
// agent's (agentapi.TimeFormat): RFC 3339 in UTC with milliseconds.
func JSONTime(t time.Time) string { return t.UTC().Format(agentapi.TimeFormat) }

// IsTerminal says whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Concat is the flag sets one after another, in order.
func Concat(sets ...[]cli.Flag) []cli.Flag {
	var out []cli.Flag
	for _, s := range sets {
		out = append(out, s...)
	}
	return out
}

// WriteJSON writes v to stdout as indented JSON.
func WriteJSON(e *Env, v any) error {
	enc := json.NewEncoder(e.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Table starts the listing of n rows, the commands' one form: the
// header line, the columns aligned on stdout (Flush when done). With no
// rows it prints none to stderr instead (the listing stays empty) and
// returns nil.
func Table(e *Env, n int, none, header string) *tabwriter.Writer {
	if n == 0 {
		fmt.Fprintln(e.Stderr, none)
		return nil
	}
	w := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, header)
	return w
}

// NonNil is s, or an empty slice for nil (JSON [] rather than null).
func NonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// ReadCerts reads every certificate in a PEM file (or one DER certificate).
func ReadCerts(path string) ([]*x509.Certificate, error) {
	b, err := safefile.Read(path, 4<<20) // a chain is a few KiB; /dev/zero is not one
	if err != nil {
		return nil, UsageErr(err)
	}
	certs, err := signer.ParseCertificates(b)
	if err != nil {
		return nil, UsageErr(fmt.Errorf("%s: %w", path, err))
	}
	return certs, nil
}
