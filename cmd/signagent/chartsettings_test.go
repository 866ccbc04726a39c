package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/cmd/signagent/internal/app"
)

// chartRefuses are the settings of signagent serve the chart leaves out of
// agent.settings on purpose: the file it renders is named by --config, it
// never prints to stdout, and its log level is agent.logLevel (quiet and
// verbose would contradict it). Old names (settings.Renamed) are left out
// too: the chart takes the new names only.
var chartRefuses = []string{"config", "context", "print-env", "quiet", "verbose", "help"}

// serveSettings are the keys of signagent serve's settings, from the
// command as the app builds it (its flags, the logging ones included).
func serveSettings(t *testing.T) []string {
	var serve *cli.Command
	var walk func([]*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Name == "serve" && serve == nil {
				serve = c
			}
			walk(c.Subcommands)
		}
	}
	walk(app.NewApp(strings.NewReader(""), io.Discard, io.Discard).Commands)
	if serve == nil {
		t.Fatal("no serve command")
	}
	var keys []string
	for _, fl := range serve.Flags {
		name := fl.Names()[0]
		if _, old := settings.Renamed[name]; old || slices.Contains(chartRefuses, name) || slices.Contains(keys, name) {
			continue
		}
		keys = append(keys, name)
	}
	slices.Sort(keys)
	return keys
}

// TestChartSettingsKeys: the chart's values.schema.json names, under
// agent.settings, every setting signagent serve takes and nothing else
// (but what the chart refuses on purpose), so that a typo is refused by
// helm and a new setting cannot be forgotten.
func TestChartSettingsKeys(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "helm", "signagent", "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Agent struct {
				Properties struct {
					Settings struct {
						AdditionalProperties *bool                      `json:"additionalProperties"`
						Properties           map[string]json.RawMessage `json:"properties"`
					} `json:"settings"`
				} `json:"properties"`
			} `json:"agent"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	s := schema.Properties.Agent.Properties.Settings
	if s.AdditionalProperties == nil || *s.AdditionalProperties {
		t.Error("agent.settings takes keys it does not name: additionalProperties must be false")
	}
	var inChart []string
	for k := range s.Properties {
		inChart = append(inChart, k)
	}
	slices.Sort(inChart)
	want := serveSettings(t)
	for _, k := range want {
		if !slices.Contains(inChart, k) {
			t.Errorf("signagent serve takes %q; agent.settings in values.schema.json does not", k)
		}
	}
	for _, k := range inChart {
		if !slices.Contains(want, k) {
			t.Errorf("agent.settings in values.schema.json takes %q; signagent serve does not (or the chart refuses it on purpose)", k)
		}
	}
	if len(want) < 40 {
		t.Errorf("only %d settings found for serve: %v", len(want), want)
	}
}
