package agent

import (
	stdlog "log"
	"strings"

	"github.com/rs/zerolog"
)

// warnLog is a standard library logger (what net/http and httputil take)
// whose lines reach log as warnings, one event per line, trimmed. Written
// to the zerolog logger directly they would carry no level at all.
func warnLog(log zerolog.Logger) *stdlog.Logger {
	return stdlog.New(warnWriter{log}, "", 0)
}

type warnWriter struct{ log zerolog.Logger }

func (w warnWriter) Write(p []byte) (int, error) {
	w.log.Warn().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}
