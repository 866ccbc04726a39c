package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agent/tokenq"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/emulator/emulatortest"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/schemes"
)

// daemonConfig is a daemon on a fresh SoftHSM token, a temporary socket
// and an audit file; no service.
func daemonConfig(t testing.TB) (agent.Config, *atomic.Int64) {
	tk := pkcs11test.New(t)
	dir, err := os.MkdirTemp("", "sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	opens := &atomic.Int64{}
	return agent.Config{
		Listen:   []string{"unix:" + filepath.Join(dir, "a.sock")},
		AuditLog: filepath.Join(dir, "audit.log"),
		Token:    tk.Selection(tk.RSA.Label), TokenConcurrency: 2, QueueSize: 64,
		APIKey: apiKey, SessionTTL: time.Hour, RequestDeadline: 10 * time.Second, MaxBody: 1 << 16,
		Log: zerolog.New(&pkcs11test.LogBuffer{}),
		Open: func(ctx context.Context, sel pkcs11.Selection, log zerolog.Logger) (tokenq.Token, error) {
			opens.Add(1)
			return pkcs11.Open(ctx, sel, log)
		},
	}, opens
}

func TestDaemonLifecycle(t *testing.T) {
	cfg, opens := daemonConfig(t)
	sock := strings.TrimPrefix(cfg.Listen[0], "unix:")
	d, err := agent.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := agentclient.NewUnix(sock)
	sign := func() error {
		_, err := c.Sign(context.Background(), agentapi.SignatureRequest{Credential: agentapi.Credential{Phone: "9161234567"}})
		return err
	}
	if err := sign(); err != nil {
		t.Fatal(err)
	}

	t.Run("an unchanged reload keeps the token and never answers 503", func(t *testing.T) {
		var wg sync.WaitGroup
		var failed atomic.Value
		stop := make(chan struct{})
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := sign(); err != nil {
						failed.Store(err)
					}
				}
			}()
		}
		for range 20 {
			if err := d.Reload(cfg); err != nil {
				t.Error(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(stop)
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			t.Errorf("a signature failed during reloads: %v", err)
		}
		if n := opens.Load(); n != 1 {
			t.Errorf("the token was opened %d times; an unchanged reload must not reopen it", n)
		}
	})

	t.Run("reload reopens a rotated audit log", func(t *testing.T) {
		if err := os.Rename(cfg.AuditLog, cfg.AuditLog+".1"); err != nil {
			t.Fatal(err)
		}
		if err := d.Reload(cfg); err != nil {
			t.Fatal(err)
		}
		if err := sign(); err != nil {
			t.Fatal(err)
		}
		// The writer writes the line a moment after the answer.
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, err := os.ReadFile(cfg.AuditLog)
			if err == nil && strings.Contains(string(b), `"operation":"sign"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the new audit log holds %q (%v)", b, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("a bad reload changes nothing", func(t *testing.T) {
		bad := cfg
		bad.QueueSize = 0
		if err := d.Reload(bad); !errors.Is(err, agent.ErrConfig) {
			t.Fatalf("reload with queue-size 0: %v, want a configuration error", err)
		}
		bad = cfg
		bad.TLS = agent.TLSFiles{Cert: "/nonexistent"}
		bad.BearerTokenFile = filepath.Join(t.TempDir(), "world")
		os.WriteFile(bad.BearerTokenFile, []byte("0123456789abcdef0123\n"), 0o644)
		os.Chmod(bad.BearerTokenFile, 0o666)
		if err := d.Reload(bad); err != nil {
			// No TCP listener: the bearer file is not read.
			t.Fatalf("reload: %v", err)
		}
		if err := sign(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a changed selection reopens the token", func(t *testing.T) {
		changed := cfg
		changed.Token.Timeout = 7 * time.Second
		if err := d.Reload(changed); err != nil {
			t.Fatal(err)
		}
		if err := sign(); err != nil {
			t.Fatal(err)
		}
		if n := opens.Load(); n != 2 {
			t.Errorf("the token was opened %d times, want 2", n)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d.Shutdown(ctx)
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket is still there after Shutdown: %v", err)
	}
	if err := d.Reload(cfg); err == nil {
		t.Error("Reload after Shutdown succeeded")
	}
	d.Shutdown(ctx) // a second Shutdown is harmless
}

func TestDaemonStartFailsCleanly(t *testing.T) {
	cfg, opens := daemonConfig(t)
	sock := strings.TrimPrefix(cfg.Listen[0], "unix:")
	cases := []struct {
		name   string
		change func(*agent.Config)
		config bool // a configuration error (exit status for bad input)
	}{
		{"bad listen address", func(c *agent.Config) { c.Listen = append(c.Listen, "udp:1") }, true},
		{"TCP beyond loopback without TLS", func(c *agent.Config) { c.Listen = append(c.Listen, "tcp:0.0.0.0:0") }, true},
		{"audit log a symlink", func(c *agent.Config) {
			link := filepath.Join(t.TempDir(), "audit")
			os.Symlink("/etc/passwd", link)
			c.AuditLog = link
		}, true},
		{"world-readable bearer file", func(c *agent.Config) {
			f := filepath.Join(t.TempDir(), "bearer")
			os.WriteFile(f, []byte("0123456789abcdef0123\n"), 0o600)
			os.Chmod(f, 0o644)
			c.BearerTokenFile = f
			c.Listen = append(c.Listen, "tcp:127.0.0.1:0")
		}, true},
		{"token that does not open", func(c *agent.Config) {
			c.Open = func(context.Context, pkcs11.Selection, zerolog.Logger) (tokenq.Token, error) {
				return nil, tokenerr.ErrPINIncorrect
			}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			tc.change(&c)
			d, err := agent.Start(context.Background(), c)
			if err == nil {
				d.Shutdown(context.Background())
				t.Fatal("Start succeeded")
			}
			if got := errors.Is(err, agent.ErrConfig); got != tc.config {
				t.Errorf("%v: configuration error %v, want %v", err, got, tc.config)
			}
			if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed Start left the socket behind: %v", err)
			}
		})
	}
	if n := opens.Load(); n != 0 {
		t.Errorf("the token was opened %d times although Start failed before it", n)
	}
}

// TestDaemonLegacyReload: a reload that leaves the legacy settings alone
// keeps the cached tokens; one that changes them (a new token lifetime)
// starts a new cache; one without --business-url turns the route off (503).
func TestDaemonLegacyReload(t *testing.T) {
	cfg, _ := daemonConfig(t)
	// The cheapest bcrypt cost: the emulator checks the password at every
	// sign-in, and at the default cost that took seconds of CPU under -race.
	hashBytes, _ := bcrypt.GenerateFromPassword([]byte(alicePassword), bcrypt.MinCost)
	hash := string(hashBytes)
	emu := emulatortest.New(t, &emulator.Config{Developers: []emulator.Developer{{Key: devKey}},
		Users: []emulator.User{{ID: "a", Login: "alice@example.com", PasswordHash: hash}}})
	pws := map[string]string{"alice@example.com": alicePassword}
	cfg.Schemes.Legacy = &schemes.LegacySettings{Client: &legacy.Config{APIURL: emu.URL(), DeveloperKey: devKey}, Passwords: pws}
	cfg.ExposeLegacyHeader = true
	d, err := agent.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	c := agentclient.NewUnix(strings.TrimPrefix(cfg.Listen[0], "unix:"))
	ask := func() (*agentapi.AuthorizationResponse, error) {
		return c.Authorization(context.Background(), agentapi.AuthorizationRequest{Scheme: "legacy", By: "password", Login: "alice@example.com"})
	}
	if a, err := ask(); err != nil || a.Cached {
		t.Fatalf("first: %+v %v", a, err)
	}
	same := cfg
	same.Schemes.Legacy = &schemes.LegacySettings{Client: &legacy.Config{APIURL: emu.URL(), DeveloperKey: devKey}, Passwords: pws}
	if err := d.Reload(same); err != nil {
		t.Fatal(err)
	}
	if a, err := ask(); err != nil || !a.Cached {
		t.Fatalf("after an unchanged reload: %+v %v", a, err)
	}
	changed := same
	changed.Schemes.Legacy = &schemes.LegacySettings{Client: &legacy.Config{APIURL: emu.URL(), DeveloperKey: devKey, TokenTTL: time.Hour}, Passwords: pws}
	if err := d.Reload(changed); err != nil {
		t.Fatal(err)
	}
	if a, err := ask(); err != nil || a.Cached || time.Until(a.ExpiresAt.Time) > time.Hour {
		t.Fatalf("after a changed reload: %+v %v", a, err)
	}
	off := changed
	off.Schemes.Legacy = nil
	if err := d.Reload(off); err != nil {
		t.Fatal(err)
	}
	if _, err := ask(); apiErr(t, err).Status != 503 {
		t.Fatalf("without --business-url: %v", err)
	}
}

// Every request the agent answered has its audit line, those answered
// while it shut down included: the writer does not hold up requests, and
// what it holds is written before the daemon ends.
func TestAuditLineForEveryRequest(t *testing.T) {
	cfg, _ := daemonConfig(t)
	sock := strings.TrimPrefix(cfg.Listen[0], "unix:")
	cfg.ShutdownGrace = 10 * time.Second
	d, err := agent.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := agentclient.NewUnix(sock)
	var answered atomic.Int64
	var wg sync.WaitGroup
	started := make(chan struct{}, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				if i == 3 {
					started <- struct{}{}
				}
				_, err := c.Sign(context.Background(), agentapi.SignatureRequest{Credential: agentapi.Credential{Phone: "9161234567"}})
				if err != nil {
					return // the agent is shutting down
				}
				answered.Add(1)
			}
		}()
	}
	for range 8 {
		<-started
	}
	// Shut down with requests in flight: those admitted finish and are
	// answered; then the audit log is closed.
	d.Shutdown(context.Background())
	wg.Wait()
	b, err := os.ReadFile(cfg.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(string(b), `"operation":"sign","outcome":"ok"`)
	if n := answered.Load(); int64(lines) < n || n < 24 {
		t.Fatalf("%d signatures answered, %d audit lines for them", n, lines)
	}
}
