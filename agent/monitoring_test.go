package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/signagent/signagent/agentapi"
)

const monitoringDir = "../deploy/monitoring"

// dashboard is what the test reads of the Grafana dashboard: each
// panel's queries and the template variables' queries.
type dashboard struct {
	Panels []struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// grafanaVariables stand in for the dashboard's variables so that
// Prometheus's parser sees the query Grafana sends.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$job", ".*", "$instance", ".*")

// promtoolAccepts writes exprs as recording rules into a throwaway rules
// file and runs promtool check rules on it: promtool has no command that
// checks an expression alone, and its rule check parses each with
// Prometheus's own parser.
func promtoolAccepts(t *testing.T, exprs map[string]string) error {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: make test installs it (Debian's prometheus package)")
	}
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range exprs {
			if !yield(k) {
				return
			}
		}
	}) {
		rules = append(rules, rule{Record: name, Expr: exprs[name]})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard.rules.yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// TestMonitoringKit: every query of the Grafana dashboard is one
// Prometheus's parser accepts, and every signagent_* name in a panel, a
// template variable or an alert rule is a metric a live agent exports (an
// agent with a token, an OpenID Connect profile, the business API behind
// its proxy and a shared store on a real redis-server, scraped on its
// metrics listener after a signature and a proxied call the service
// refused once).
func TestMonitoringKit(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(monitoringDir, "signagent.dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash dashboard
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&dash); err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{}
	var texts []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs[fmt.Sprintf("dashboard:panel_%d_%s", p.ID, q.RefID)] = grafanaVariables.Replace(q.Expr)
			texts = append(texts, q.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		texts = append(texts, v.Definition)
	}
	if len(exprs) < 20 {
		t.Fatalf("%d dashboard queries read: the dashboard's shape changed?", len(exprs))
	}
	if err := promtoolAccepts(t, exprs); err != nil {
		t.Fatalf("a dashboard query Prometheus's parser refuses: %v", err)
	}
	// The check can fail: a query with a missing parenthesis is refused.
	if err := promtoolAccepts(t, map[string]string{"dashboard:broken": "sum(rate(signagent_requests_total[5m])"}); err == nil {
		t.Fatal("promtool accepted a broken query: the dashboard check proves nothing")
	}

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	rb, err := os.ReadFile(filepath.Join(monitoringDir, "signagent.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(rb, &rules); err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			texts = append(texts, r.Expr)
			alerts++
		}
	}
	if alerts < 9 {
		t.Fatalf("%d alert rules read", alerts)
	}

	exported := liveMetricFamilies(t)
	names := map[string]bool{}
	for _, text := range texts {
		for _, n := range regexp.MustCompile(`\bsignagent_[a-z0-9_]+`).FindAllString(text, -1) {
			names[n] = true
		}
	}
	for n := range names {
		base := n
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, suffix); ok && exported[b] == "histogram" {
				base = b
			}
		}
		if exported[base] == "" {
			t.Errorf("%s is used by the dashboard or the alert rules, but the agent exports no such metric", n)
		}
	}
	t.Logf("%d dashboard queries in %d panels parsed; %d alert rules; %d signagent_* names, each exported", len(exprs), len(dash.Panels), alerts, len(names))
}

// liveMetricFamilies starts an agent with every part that has metrics,
// uses it, and returns the metric families its metrics listener exports
// (name -> type).
func liveMetricFamilies(t *testing.T) map[string]string {
	t.Helper()
	h := start(t, options{oidc: true, apiURL: "emu", metrics: true})
	shareOIDC(t, h, h, 5)
	ctx := context.Background()
	if _, err := h.client.Sign(ctx, agentapi.SignatureRequest{Credential: agentapi.Credential{Phone: "9161234567"}}); err != nil {
		t.Fatal(err)
	}
	// Refused once: the agent refreshes and sends it again (a retry).
	h.emu.InjectFaults("GetMyOrganizations", emuStatus(401))
	if resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "oidc", nil, ""); resp.StatusCode != 200 {
		t.Fatalf("a proxied call: %d %s", resp.StatusCode, body)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + h.d.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	families := map[string]string{}
	values := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			families[f[2]] = f[3]
		} else if len(f) == 2 {
			v, _ := strconv.ParseFloat(f[1], 64)
			values[f[0]] = v
		}
	}
	// The new gauges say what they should: the emulator's clock is this
	// machine's, the token's certificate and alice's sign-in are current,
	// the store answers.
	now := float64(time.Now().Unix())
	for name, ok := range map[string]func(v float64) bool{
		"signagent_service_clock_skew_seconds":                               func(v float64) bool { return v > -3 && v <= 1 },
		"signagent_certificate_expiry_timestamp_seconds":                     func(v float64) bool { return v > now },
		`signagent_oidc_refresh_expiry_timestamp_seconds{profile="default"}`: func(v float64) bool { return v > now+29*86400 && v <= now+30*86400+1 },
		"signagent_store_up":                                                 func(v float64) bool { return v == 1 },
		`signagent_dependency_up{dependency="store"}`:                        func(v float64) bool { return v == 1 },
		`signagent_oidc_refreshes_total{result="ok"}`:                        func(v float64) bool { return v == 1 },
	} {
		if v, found := values[name]; !found || !ok(v) {
			t.Errorf("%s = %v (exported: %v)", name, v, found)
		}
	}
	return families
}
