package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
)

// TestSettingsPrecedence pins flag > environment > file > default.
func TestSettingsPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(file, []byte("queue-size: 7\nsession-ttl: 2h\nlisten: [unix:/from/file]\nallow-uid: [5, 6]\nlegacy-snils: true\nlog-level: warn\n"), 0o600)
	for _, tc := range []struct {
		name  string
		args  []string
		env   map[string]string
		queue int
		ttl   time.Duration
	}{
		{"default", []string{"--config", "/dev/null"}, nil, 64, 12 * time.Hour},
		{"file over default", []string{"--config", file}, nil, 7, 2 * time.Hour},
		{"env over file", []string{"--config", file}, map[string]string{"SIGNAGENT_QUEUE_SIZE": "9"}, 9, 2 * time.Hour},
		{"flag over env", []string{"--config", file, "--queue-size", "11"}, map[string]string{"SIGNAGENT_QUEUE_SIZE": "9"}, 11, 2 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var got *settings.Settings
			app := &cli.App{Commands: []*cli.Command{{Name: "serve", Flags: append(factory.ServeFlags(), cmdutil.LogFlags("")...), Action: func(c *cli.Context) error {
				var err error
				got, err = settings.Load(c, c.String("config"), "", true, cmdutil.KnownKeys(c.App))
				return err
			}}}}
			if err := app.Run(append([]string{"signagent", "serve"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			if q := got.Int("queue-size"); q != tc.queue {
				t.Fatalf("queue-size %d, want %d", q, tc.queue)
			}
			if ttl := got.Duration("session-ttl"); ttl != tc.ttl {
				t.Fatalf("session-ttl %v, want %v", ttl, tc.ttl)
			}
			if err := got.Err(); err != nil {
				t.Fatal(err)
			}
			if tc.name == "file over default" {
				uids, listen, legacy := got.Ints("allow-uid"), got.Strings("listen"), got.Bool("legacy-snils")
				if len(uids) != 2 || uids[1] != 6 || len(listen) != 1 || listen[0] != "unix:/from/file" || !legacy {
					t.Fatalf("lists and bools from the file: %v %v %v", uids, listen, legacy)
				}
				if got.String("log-level") != "warn" {
					t.Fatalf("log-level %q from the file", got.String("log-level"))
				}
			}
		})
	}
}

func TestSettingsRefuseUnknownAndMistyped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown key":    "pin: '1234'\n",
		"bad duration":   "session-ttl: forever\n",
		"bad number":     "queue-size: many\n",
		"bad bool":       "legacy-snils: maybe\n",
		"not yaml":       "a: [\n",
		"config in file": "config: other.yaml\n",
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, "c.yaml")
			os.WriteFile(file, []byte(body), 0o600)
			app := &cli.App{Commands: []*cli.Command{{Name: "serve", Flags: factory.ServeFlags(), Action: func(c *cli.Context) error {
				s, err := settings.Load(c, c.String("config"), "", true, cmdutil.KnownKeys(c.App))
				if err != nil {
					return err
				}
				s.Duration("session-ttl")
				s.Int("queue-size")
				s.Bool("legacy-snils")
				return s.Err()
			}}}}
			if err := app.Run([]string{"signagent", "serve", "--config", file}); err == nil || cmdutil.ExitCode(err) != cmdutil.ExitBadInput {
				t.Fatalf("err = %v (exit %d)", err, cmdutil.ExitCode(err))
			}
		})
	}
}
