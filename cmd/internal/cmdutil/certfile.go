package cmdutil

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/settings"
)

// OldCertFlag is --certificate-file's old name (--cert, SIGNAGENT_CERT, the
// settings key cert): hidden, still read, with one line on stderr that
// names the new one.
var OldCertFlag = &cli.StringFlag{Name: "cert", Hidden: true, Category: catToken, EnvVars: []string{"SIGNAGENT_CERT"}, Usage: "old name of --certificate-file"}

// renamedKey is where the run notes that the old name's line was written.
const renamedKey = "signagent/cert-renamed"

// CertificateFile is --certificate-file, or its old name --cert (with one
// line on stderr, once a run, naming the new one).
func CertificateFile(s *settings.Settings) string {
	if p := s.String("certificate-file"); p != "" {
		return p
	}
	old := s.String("cert")
	if old == "" {
		return ""
	}
	if app := s.Context().App; app != nil && app.Metadata[renamedKey] == nil {
		if app.Metadata == nil {
			app.Metadata = map[string]any{}
		}
		app.Metadata[renamedKey] = true
		w := app.ErrWriter
		if w == nil {
			w = os.Stderr
		}
		fmt.Fprintf(w, "signagent: %s is an old name: use --certificate-file (SIGNAGENT_CERTIFICATE_FILE, settings key certificate-file)\n", oldCertSource(s))
	}
	return old
}

// oldCertSource names where the old name was given.
func oldCertSource(s *settings.Settings) string {
	switch {
	case FromFile(s.Context().App)["cert"] || settings.GivenIn(s.Context(), "cert") == nil:
		return "the settings key cert"
	case os.Getenv("SIGNAGENT_CERT") != "":
		return "--cert or SIGNAGENT_CERT"
	}
	return "--cert"
}

// certificateFileConflict refuses the new and the old name naming two
// different files.
func certificateFileConflict(s *settings.Settings) error {
	n, o := s.String("certificate-file"), s.String("cert")
	if n != "" && o != "" && n != o {
		return UsageErr(errors.New("--certificate-file and its old name --cert (or SIGNAGENT_CERT, or the settings key cert) name different files; give only --certificate-file"))
	}
	return nil
}
