package emulator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rs/zerolog"
	"github.com/signagent/signagent/safefile"
)

// ErrConfig marks a bad configuration file or listen address.
var ErrConfig = errors.New("emulator configuration")

// RunLoopback serves the emulator configured in configFile on addr (a
// loopback address only: it is a test tool) until ctx is done, then stops
// within 5s. The base URL is written to urlFile when it is not empty.
func RunLoopback(ctx context.Context, addr, configFile, urlFile string, log zerolog.Logger) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || !isLoopback(host) {
		return fmt.Errorf("%w: --listen %q: the emulator serves on loopback only (127.0.0.1:PORT or [::1]:PORT)", ErrConfig, addr)
	}
	cfg, err := LoadConfig(configFile)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	srv, err := New(cfg, log)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := srv.Listen(addr); err != nil {
		return fmt.Errorf("could not listen on %s: %w", addr, err)
	}
	if urlFile != "" {
		if err := safefile.Write(urlFile, []byte(srv.URL()+"\n"), 0o644); err != nil {
			srv.Close(context.Background())
			return err
		}
	}
	log.Info().Str("url", srv.URL()).Int("partners", len(cfg.Partners)).Int("users", len(cfg.Users)).Msg("emulator listening")
	<-ctx.Done()
	log.Info().Msg("emulator stopping")
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Close(shut)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
