package helm

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The helm test hook (templates/tests/ready.yaml): a pod of the agent's
// image that asks an agent, through the Service's metrics port, whether it
// is ready. No cluster here: its command line is run against a real agent
// by TestRenderedAgentServes (as rendered) and by cmd/signagent's
// TestChartTestHookCommand (ready and not ready).

// testCommand is the rendered hook's command line for the release crm in
// partners (render's), the metrics port port and the CA file ca.
func testCommand(bin, port, ca string) []string {
	return []string{bin, "agent", "status", "--probe", "ready", "--agent-url", "https://crm-signagent.partners.svc:" + port, "--agent-ca", ca}
}

// checkTestPod: the hook is a test hook running the agents' image as
// strictly as they run, asks the metrics port of the Service with the CA
// mounted where its command line says, holds no secret but a client
// certificate's key when the agent asks for one, is not taken for an
// agent, and the NetworkPolicy lets it reach the metrics port alone.
func checkTestPod(t *testing.T, p *corev1.Pod, d *appsv1.Deployment, np *networkingv1.NetworkPolicy) {
	t.Helper()
	if p == nil {
		t.Fatal("no helm test pod rendered")
	}
	if p.Annotations["helm.sh/hook"] != "test" || !strings.Contains(p.Annotations["helm.sh/hook-delete-policy"], "before-hook-creation") {
		t.Errorf("test pod annotations: %v", p.Annotations)
	}
	if p.Spec.RestartPolicy != corev1.RestartPolicyNever || p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
		t.Errorf("test pod: restartPolicy %q, automountServiceAccountToken %v", p.Spec.RestartPolicy, p.Spec.AutomountServiceAccountToken)
	}
	if len(p.Spec.Containers) != 1 {
		t.Fatalf("test pod containers: %d", len(p.Spec.Containers))
	}
	c, agent := p.Spec.Containers[0], d.Spec.Template.Spec.Containers[0]
	if c.Image != agent.Image {
		t.Errorf("test pod image %q, the agents' %q", c.Image, agent.Image)
	}
	sc := c.SecurityContext
	if psc := p.Spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("test pod security: %+v %+v", p.Spec.SecurityContext, sc)
	}
	var port string
	for _, cp := range agent.Ports {
		if cp.Name == "metrics" {
			port = strconv.Itoa(int(cp.ContainerPort))
		}
	}
	var ca string
	if i := slices.Index(c.Command, "--agent-ca"); i > 0 && i+1 < len(c.Command) {
		ca = c.Command[i+1]
	}
	if want := testCommand(agent.Command[0], port, ca); !slices.Equal(c.Command, want) {
		t.Errorf("test pod command %q, want %q", c.Command, want)
	}
	// Every file it names is in a Secret volume mounted read-only.
	files := []string{ca}
	clientCA := slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "secret-tls-client-ca" })
	if clientCA {
		want := []string{"--agent-cert", "/etc/signagent/test/client/tls.crt", "--agent-key", "/etc/signagent/test/client/tls.key"}
		if !slices.Equal(c.Args, want) {
			t.Errorf("test pod args with agent.tls.clientCA: %q, want %q", c.Args, want)
		}
		files = append(files, want[1], want[3])
	} else if len(c.Args) != 0 {
		t.Errorf("test pod args without agent.tls.clientCA: %q", c.Args)
	}
	for _, f := range files {
		var vol string
		for _, m := range c.VolumeMounts {
			if filepath.Dir(f) == m.MountPath && m.ReadOnly {
				vol = m.Name
			}
		}
		i := slices.IndexFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vol })
		if i < 0 || p.Spec.Volumes[i].Secret == nil || !slices.ContainsFunc(p.Spec.Volumes[i].Secret.Items, func(k corev1.KeyToPath) bool { return k.Path == filepath.Base(f) }) {
			t.Errorf("test pod: %s is in no Secret volume mounted read-only", f)
			continue
		}
		if m := p.Spec.Volumes[i].Secret.DefaultMode; strings.HasSuffix(f, ".key") && (m == nil || *m&0o007 != 0) {
			t.Errorf("test pod: the client key %s is open to others (mode %v)", f, m)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Errorf("test pod: environment variable %s from %v", e.Name, e.ValueFrom)
		}
	}
	// Not an agent: neither the Deployment's nor (so) the Service's
	// selector takes it.
	sel := labels.SelectorFromSet(d.Spec.Selector.MatchLabels)
	if sel.Matches(labels.Set(p.Labels)) {
		t.Errorf("test pod labels %v match the agents' selector %v", p.Labels, sel)
	}
	if np == nil {
		return
	}
	admitted := false
	for _, rule := range np.Spec.Ingress {
		for _, peer := range rule.From {
			if peer.PodSelector == nil || peer.NamespaceSelector != nil || !labels.SelectorFromSet(peer.PodSelector.MatchLabels).Matches(labels.Set(p.Labels)) {
				continue
			}
			for _, rp := range rule.Ports {
				if rp.Port == nil || rp.Port.String() != "metrics" {
					t.Errorf("the NetworkPolicy lets the test pod reach port %v", rp.Port)
				}
			}
			admitted = len(rule.Ports) > 0
		}
	}
	if !admitted {
		t.Errorf("the NetworkPolicy does not let the test pod reach the metrics port: %+v", np.Spec.Ingress)
	}
}

// TestTestHookValues: tests.enabled false, or no Service, renders no test
// pod (and the NetworkPolicy admits nobody when networkPolicy.from is
// empty); tests.ca names the CA's Secret and key the pod mounts.
func TestTestHookValues(t *testing.T) {
	oidc := filepath.Join(chartDir, "values-oidc-redis.yaml")
	pods := func(set ...string) ([]*corev1.Pod, *networkingv1.NetworkPolicy) {
		t.Helper()
		manifest, err := render(vals(t, oidc, set...))
		if err != nil {
			t.Fatalf("%v: %v", set, err)
		}
		var ps []*corev1.Pod
		var np *networkingv1.NetworkPolicy
		for _, doc := range documents(manifest) {
			obj, err := check(doc)
			if err != nil {
				t.Fatalf("%v: %v\n%s", set, err, doc)
			}
			switch o := obj.(type) {
			case *corev1.Pod:
				ps = append(ps, o)
			case *networkingv1.NetworkPolicy:
				np = o
			}
		}
		return ps, np
	}
	for _, set := range [][]string{{"tests.enabled=false"}, {"service.enabled=false"}} {
		ps, np := pods(append(set, "networkPolicy.from=null")...)
		if len(ps) != 0 {
			t.Errorf("%v: %d test pods rendered", set, len(ps))
		}
		if np == nil || len(np.Spec.Ingress) != 0 {
			t.Errorf("%v: the NetworkPolicy admits %+v, want nobody", set, np)
		}
	}
	ps, _ := pods("tests.ca.secretName=partner-ca", "tests.ca.key=bundle.pem")
	if len(ps) != 1 {
		t.Fatalf("tests.ca: %d test pods", len(ps))
	}
	c := ps[0].Spec.Containers[0]
	if i := slices.Index(c.Command, "--agent-ca"); i < 0 || c.Command[i+1] != "/etc/signagent/test/ca/bundle.pem" {
		t.Errorf("tests.ca: command %q", c.Command)
	}
	if v := ps[0].Spec.Volumes[0]; v.Secret == nil || v.Secret.SecretName != "partner-ca" || v.Secret.Items[0].Key != "bundle.pem" {
		t.Errorf("tests.ca: volume %+v", v)
	}
}
