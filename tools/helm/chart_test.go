// Package helm holds the Helm chart's checks (deploy/helm/signagent), in a
// module of its own so that helm and client-go are not dependencies of
// signagent: helm lint and helm template (helm's own packages, pinned in
// go.mod, as the helm binary runs them: go tool helm) for every values
// example, and each rendered document read back into the Kubernetes API
// types with strict decoding (unknown fields, wrong types) and checked
// against the server-side-apply schema of its kind, all offline.
package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

const chartDir = "../../deploy/helm/signagent"

// kubeVersion is what .Capabilities says: helm's own default is older
// than the chart's kubeVersion.
const kubeVersion = "1.33.0"

// examples are the values files beside the chart.
func examples(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join(chartDir, "values-*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("values examples: %v %v", files, err)
	}
	return files
}

func vals(t *testing.T, file string, set ...string) map[string]any {
	t.Helper()
	opts := values.Options{Values: set}
	if file != "" {
		opts.ValueFiles = []string{file}
	}
	v, err := opts.MergeValues(getter.Providers{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// lint is helm lint --strict: warnings count as errors.
func lint(t *testing.T, v map[string]any) []string {
	t.Helper()
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	l := action.NewLint()
	l.Strict = true
	l.KubeVersion = kv
	res := l.Run([]string{chartDir}, v)
	var bad []string
	for _, m := range res.Messages {
		if m.Severity >= support.WarningSev {
			bad = append(bad, m.Error())
		}
	}
	for _, err := range res.Errors {
		bad = append(bad, err.Error())
	}
	return bad
}

// render is helm template: the manifest of a client-only dry-run install,
// its hooks (the helm test's pod) after it, as helm template prints them.
func render(v map[string]any) (string, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return "", err
	}
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return "", err
	}
	in := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	in.DryRun, in.ClientOnly, in.Replace = true, true, true
	in.ReleaseName, in.Namespace = "crm", "partners"
	in.KubeVersion = kv
	rel, err := in.Run(ch, v)
	if err != nil {
		return "", err
	}
	manifest := rel.Manifest
	for _, h := range rel.Hooks {
		manifest += "\n---\n# Source: " + h.Path + "\n" + h.Manifest + "\n"
	}
	return manifest, nil
}

// typeConverter knows the server-side-apply schema of every built-in kind.
var typeConverter = applyconfigurations.NewTypeConverter(scheme.Scheme)

// check reads one rendered document back into its API type, strictly,
// and returns it typed.
func check(doc string) (runtime.Object, error) {
	js, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		return nil, err
	}
	var u unstructured.Unstructured
	if err := json.Unmarshal(js, &u.Object); err != nil {
		return nil, err
	}
	gvk := u.GroupVersionKind()
	if gvk == monitoringv1.SchemeGroupVersion.WithKind("ServiceMonitor") {
		var sm monitoringv1.ServiceMonitor
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &sm, true); err != nil {
			return nil, fmt.Errorf("%s: %w", gvk.Kind, err)
		}
		return &sm, nil
	}
	if gvk == monitoringv1.SchemeGroupVersion.WithKind("PrometheusRule") {
		var pr monitoringv1.PrometheusRule
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &pr, true); err != nil {
			return nil, fmt.Errorf("%s: %w", gvk.Kind, err)
		}
		return &pr, nil
	}
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("%s: not a kind client-go knows: %w", gvk, err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, obj, true); err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
	}
	if _, err := typeConverter.ObjectToTyped(&u); err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
	}
	return obj, nil
}

// documents splits a manifest in helm's order.
func documents(manifest string) []string {
	m := releaseutil.SplitManifests(manifest)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	var docs []string
	for _, k := range keys {
		if strings.TrimSpace(m[k]) != "" {
			docs = append(docs, m[k])
		}
	}
	return docs
}

// TestExamples: each values example lints clean (strict), renders, and
// every document is a valid object of its kind; the Deployment is as
// strict as the systemd unit and gets every secret from a Secret file.
func TestExamples(t *testing.T) {
	serveFlags := serveFlags(t)
	for _, f := range examples(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			v := vals(t, f)
			if bad := lint(t, v); len(bad) > 0 {
				t.Fatalf("helm lint --strict: %s", strings.Join(bad, "\n"))
			}
			manifest, err := render(v)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			kinds := map[string]int{}
			var dep *appsv1.Deployment
			var cfg *corev1.ConfigMap
			var hook *corev1.Pod
			var np *networkingv1.NetworkPolicy
			for _, doc := range documents(manifest) {
				obj, err := check(doc)
				if err != nil {
					t.Fatalf("%v\n%s", err, doc)
				}
				kind := obj.GetObjectKind().GroupVersionKind().Kind
				switch o := obj.(type) {
				case *appsv1.Deployment:
					dep = o
				case *corev1.ConfigMap:
					cfg = o
				case *corev1.Pod:
					hook = o
				case *networkingv1.NetworkPolicy:
					np = o
				case *monitoringv1.ServiceMonitor:
					kind = "ServiceMonitor"
					checkServiceMonitor(t, o)
				case *monitoringv1.PrometheusRule:
					kind = "PrometheusRule"
					checkRules(t, o)
				}
				kinds[kind]++
			}
			if dep == nil || cfg == nil || kinds["Service"] != 1 {
				t.Fatalf("rendered kinds %v", kinds)
			}
			checkDeployment(t, dep)
			checkSettings(t, cfg, dep, serveFlags)
			checkTestPod(t, hook, dep, np)
			// The NetworkPolicy is on unless a values file turns it off.
			if kinds["NetworkPolicy"] != 1 {
				t.Errorf("NetworkPolicy: %d rendered", kinds["NetworkPolicy"])
			}
			if strings.Contains(f, "sentinel") {
				for _, k := range []string{"PodDisruptionBudget", "ServiceMonitor", "PrometheusRule"} {
					if kinds[k] != 1 {
						t.Errorf("%s: %d rendered", k, kinds[k])
					}
				}
			}
		})
	}
}

// checkDeployment: what deploy/signagent.service promises, in Kubernetes
// terms, and secrets only as files.
func checkDeployment(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
		psc.FSGroup == nil || psc.RunAsGroup == nil || *psc.FSGroup != *psc.RunAsGroup ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v", psc)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the service account token is mounted")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("container securityContext %+v", sc)
	}
	secretEnv := regexp.MustCompile(`^SIGNAGENT_.*(KEY|PIN|SECRET|PASSWORD|TOKEN|SID)`)
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil || secretEnv.MatchString(e.Name) {
			t.Errorf("a secret in the environment: %s", e.Name)
		}
	}
	if len(c.EnvFrom) != 0 {
		t.Errorf("envFrom: %+v", c.EnvFrom)
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		want := map[string]string{"liveness": "live", "readiness": "ready", "startup": "live"}[name]
		if p == nil || p.Exec == nil || !slices.Contains(p.Exec.Command, "--probe") || !slices.Contains(p.Exec.Command, want) {
			t.Errorf("%s probe %+v", name, p)
		}
	}
	for _, vol := range pod.Volumes {
		// The agent refuses a settings file every user may read.
		if c := vol.ConfigMap; c != nil && (c.DefaultMode == nil || *c.DefaultMode&0o007 != 0) {
			t.Errorf("configMap volume %s: mode %v", vol.Name, c.DefaultMode)
		}
		if s := vol.Secret; s != nil {
			if s.DefaultMode == nil || *s.DefaultMode != 0o440 || s.Optional == nil || *s.Optional {
				t.Errorf("secret volume %s: mode %v, optional %v", vol.Name, s.DefaultMode, s.Optional)
			}
		}
	}
}

// checkSettings: agent.yaml has only settings signagent serve knows (its
// flags, from docs/cli.md, which TestCLIReference keeps in step with the
// code), and every file it names is mounted.
func checkSettings(t *testing.T, cfg *corev1.ConfigMap, d *appsv1.Deployment, flags map[string]bool) {
	t.Helper()
	var settings map[string]any
	if err := yaml.UnmarshalStrict([]byte(cfg.Data["agent.yaml"]), &settings); err != nil {
		t.Fatal(err)
	}
	mounts := map[string]bool{}
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = true
	}
	for k, v := range settings {
		if !flags[k] {
			t.Errorf("agent.yaml: %s is not a setting of signagent serve", k)
		}
		var paths []string
		switch v := v.(type) {
		case string:
			paths = append(paths, v)
		case []any:
			for _, s := range v {
				_, p, _ := strings.Cut(fmt.Sprint(s), "=") // legacy-password-file LOGIN=FILE
				paths = append(paths, p)
			}
		}
		for _, p := range paths {
			if strings.HasPrefix(p, "/etc/signagent/") && !mounts[filepath.Dir(p)] {
				t.Errorf("agent.yaml: %s %s is in no mounted volume", k, p)
			}
		}
	}
	for _, k := range []string{"listen", "metrics-listen", "bearer-token-file", "tls-cert", "tls-key", "token-store"} {
		if settings[k] == nil {
			t.Errorf("agent.yaml has no %s", k)
		}
	}
}

// serveFlags are the flags of signagent serve as docs/cli.md lists them.
func serveFlags(t *testing.T) map[string]bool {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(b, []byte("\n## serve\n"))
	if !ok {
		t.Fatal("docs/cli.md has no serve section")
	}
	if i := bytes.Index(rest, []byte("\n## ")); i >= 0 {
		rest = rest[:i]
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`\*\*--([a-z0-9-]+)\*\*`).FindAllSubmatch(rest, -1) {
		flags[string(m[1])] = true
	}
	if !flags["store-key-file"] || !flags["listen"] {
		t.Fatalf("serve flags read from docs/cli.md: %v", flags)
	}
	return flags
}

// TestRefused: values the chart refuses, each with a line that says why,
// from the schema (values.schema.json: helm lint fails too) or the
// templates (fail and required: helm lint reports those as INFO, by
// design, so that a chart with required values lints).
func TestRefused(t *testing.T) {
	oidc := filepath.Join(chartDir, "values-oidc-redis.yaml")
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"the store key in an environment variable", []string{"extraEnv[0].name=SIGNAGENT_STORE_KEY_FILE", "extraEnv[0].value=/k"}, "refused: a variable holding a secret"},
		{"a PIN in an environment variable", []string{"extraEnv[0].name=SIGNAGENT_PIN", "extraEnv[0].value=hunter2"}, "refused: a variable holding a secret"},
		{"an auth.sid in an environment variable", []string{"extraEnv[0].name=SIGNAGENT_SID", "extraEnv[0].value=s1d"}, "refused: a variable holding a secret"},
		{"an auth.sid's file in an environment variable", []string{"extraEnv[0].name=SIGNAGENT_SID_FILE", "extraEnv[0].value=/s"}, "refused: a variable holding a secret"},
		{"the client secret in an environment variable", []string{"extraEnv[0].name=SIGNAGENT_CLIENT_SECRET", "extraEnv[0].value=s"}, "refused: a variable holding a secret"},
		{"the store password in an environment variable", []string{"extraEnv[0].name=SIGNAGENT_STORE_PASSWORD", "extraEnv[0].value=s"}, "refused: a variable holding a secret"},
		{"the developer key in an environment variable", []string{"extraEnv[0].name=SIGNAGENT_DEVELOPER_KEY", "extraEnv[0].value=s"}, "refused: a variable holding a secret"},
		{"a password in the store URL", []string{"store.url=redis://app:hunter2@redis:6379/0"}, "refused: a password in the URL"},
		{"a store that is not Redis", []string{"store.url=memcached://m:11211"}, "does not match pattern"},
		{"no agent", []string{"replicaCount=0"}, "minimum"},
		{"a writable root", []string{"securityContext.readOnlyRootFilesystem=false"}, "readOnlyRootFilesystem"},
		{"root", []string{"podSecurityContext.runAsNonRoot=false"}, "runAsNonRoot"},
		{"a misspelt value", []string{"replicas=3"}, "additional properties 'replicas' not allowed"},
		{"a secret setting", []string{"agent.settings.pin=hunter2"}, "invalid propertyName 'pin'"},
		{"a misspelt setting", []string{"agent.settings.listn=tcp:0.0.0.0:1"}, "at '/agent/settings': additional properties 'listn' not allowed"},
		{"an old name of a setting", []string{"agent.settings.api-url=https://api.example"}, "additional properties 'api-url' not allowed"},
		{"a setting the chart sets", []string{"agent.settings.store-key-file=/k"}, "agent.settings.store-key-file is set by the chart"},
		{"several agents without a shared store", []string{"store.url="}, "replicaCount above 1 needs store.url"},
		{"nothing to serve", []string{"oidc.enabled=false"}, "nothing to serve"},
		{"no TLS", []string{"agent.tls.secretName="}, "agent/tls/secretName"},
		{"a digest that is not one", []string{"image.digest=sha256:abc"}, "at '/image/digest'"},
		{"a volume mount without a path", []string{"extraVolumeMounts[0].name=x"}, "missing property 'mountPath'"},
		{"client certificates, none for the helm test", []string{"agent.tls.clientCA.secretName=ca", "agent.tls.clientCA.key=ca.crt"}, "tests.clientCertSecret is required with agent.tls.clientCA"},
		{"a misspelt tests value", []string{"tests.clientCert=x"}, "at '/tests': additional properties 'clientCert' not allowed"},
	} {
		v := vals(t, oidc, tc.set...)
		_, err := render(v)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if bad := lint(t, v); len(bad) == 0 && strings.Contains(err.Error(), "schema") {
			t.Errorf("%s: helm lint passed", tc.name)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error quotes the secret: %v", tc.name, err)
		}
	}
}

// TestCheckCatches: the manifest check refuses what a typo or a wrong type
// in a template would render (so that TestExamples can fail).
func TestCheckCatches(t *testing.T) {
	manifest, err := render(vals(t, filepath.Join(chartDir, "values-oidc-redis.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	var dep string
	for _, doc := range documents(manifest) {
		if strings.Contains(doc, "\nkind: Deployment\n") {
			dep = doc
		}
	}
	if _, err := check(dep); err != nil {
		t.Fatalf("the rendered Deployment: %v", err)
	}
	for name, edit := range map[string][2]string{
		"unknown field":         {"containerPort:", "containerPortz:"},
		"a string for an int":   {"replicas: 3", `replicas: "3"`},
		"a list for a map":      {"matchLabels:\n", "matchLabels:\n        - x\n"},
		"a YAML 1.1 boolean":    {"name: signagent\n", "name: y\n"},
		"a duplicated key":      {"replicas: 3", "replicas: 3\n  replicas: 4"},
		"a ServiceMonitor typo": {"", ""},
	} {
		doc := strings.Replace(dep, edit[0], edit[1], 1)
		if name == "a ServiceMonitor typo" {
			doc = "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec:\n  endpoints: [{port: https, intervall: 30s}]\n"
		} else if doc == dep {
			t.Fatalf("%s: the edit %q matched nothing", name, edit[0])
		}
		if _, err := check(doc); err == nil {
			t.Errorf("%s: passed", name)
		}
	}
	if _, err := check("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x}\n"); err == nil {
		t.Error("an unknown kind passed")
	}
}

// checkServiceMonitor: Prometheus scrapes the metrics port, over TLS,
// and is handed no credential of the agent's callers.
func checkServiceMonitor(t *testing.T, sm *monitoringv1.ServiceMonitor) {
	t.Helper()
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints: %+v", sm.Spec.Endpoints)
	}
	ep := sm.Spec.Endpoints[0]
	if ep.Port != "metrics" || ep.Path != "/metrics" || ep.Scheme == nil || *ep.Scheme != "https" {
		t.Errorf("ServiceMonitor scrapes port %q path %q scheme %v", ep.Port, ep.Path, ep.Scheme)
	}
	if ep.Authorization != nil || ep.BasicAuth != nil || ep.OAuth2 != nil || ep.BearerTokenSecret != nil {
		t.Errorf("ServiceMonitor hands Prometheus a credential: %+v", ep)
	}
}

const rulesFile = "../../deploy/monitoring/signagent.rules.yaml"

// checkRules: the PrometheusRule holds deploy/monitoring's rule groups as
// they are (the alerts' templates untouched by Helm's).
func checkRules(t *testing.T, pr *monitoringv1.PrometheusRule) {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &want); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(pr.Spec.Groups)
	wantJSON, _ := json.Marshal(want.Groups)
	if !bytes.Equal(got, wantJSON) {
		t.Errorf("the PrometheusRule's groups differ from %s:\n%s\nwant\n%s", rulesFile, got, wantJSON)
	}
	alerts := 0
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && strings.Contains(r.Annotations["summary"], "{{ $labels.") {
				alerts++
			}
		}
	}
	if alerts < 9 {
		t.Errorf("%d alerts with their templates in the PrometheusRule", alerts)
	}
}

// TestRulesCopy: the chart's copy of the alert rules (Helm's .Files reads
// only inside the chart) is deploy/monitoring's, byte for byte.
func TestRulesCopy(t *testing.T) {
	want, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(chartDir, "files", "signagent.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("deploy/helm/signagent/files/signagent.rules.yaml differs from deploy/monitoring/signagent.rules.yaml: cp deploy/monitoring/signagent.rules.yaml deploy/helm/signagent/files/")
	}
}
