// Package emulatortest starts the emulator for one test, as net/http/httptest
// starts a server: configured, serving on a loopback port, logging into the
// test's buffer if it gives one, and closed when the test ends. The suites that
// talk to the service (trusted, legacy, oidc, service, agent, the command)
// start theirs with it instead of each writing the same set-up.
package emulatortest

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/emulator"
)

// Server is an emulator serving for one test.
type Server struct {
	*emulator.Server
}

// Options shapes the emulator beyond its configuration.
type Options struct {
	// Now is the emulator's clock, set before it serves (time.Now when
	// nil): a test that moves time shares its clock with the client.
	Now func() time.Time
	// Log is where the emulator logs (a test's log buffer, perhaps shared
	// with the agent's log); nowhere when nil.
	Log io.Writer
}

// New starts the emulator configured by cfg on a loopback port and closes
// it when the test ends; a configuration it refuses fails the test.
func New(t testing.TB, cfg *emulator.Config) *Server { return NewWith(t, cfg, Options{}) }

// NewWith is New shaped by o.
func NewWith(t testing.TB, cfg *emulator.Config, o Options) *Server {
	t.Helper()
	log := zerolog.Nop()
	if o.Log != nil {
		log = zerolog.New(o.Log)
	}
	s := &Server{}
	var err error
	if s.Server, err = emulator.New(cfg, log); err != nil {
		t.Fatalf("emulator configuration: %v", err)
	}
	if o.Now != nil {
		s.SetClock(o.Now)
	}
	if err := s.Start(); err != nil {
		t.Fatalf("start the emulator: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}
