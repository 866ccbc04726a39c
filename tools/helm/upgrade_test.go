package helm

import (
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// deployment renders the chart with values file and set, and returns its
// Deployment, checked.
func deployment(t *testing.T, file string, set ...string) *appsv1.Deployment {
	t.Helper()
	manifest, err := render(vals(t, file, set...))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range documents(manifest) {
		obj, err := check(doc)
		if err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if d, ok := obj.(*appsv1.Deployment); ok {
			return d
		}
	}
	t.Fatal("no Deployment rendered")
	return nil
}

// TestRollingUpgrade: by default a helm upgrade or rollback replaces the
// agents one at a time, a new one ready before an old one stops
// (maxUnavailable 0), and a stopping pod sleeps in preStop while the
// Service drops it, within a grace period that covers the sleep and the
// agent's own shutdown grace (10s); each is settable (docs/upgrading.md).
func TestRollingUpgrade(t *testing.T) {
	oidc := filepath.Join(chartDir, "values-oidc-redis.yaml")
	d := deployment(t, oidc)
	s := d.Spec.Strategy
	if s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate == nil ||
		*s.RollingUpdate.MaxUnavailable != intstr.FromInt32(0) || *s.RollingUpdate.MaxSurge != intstr.FromInt32(1) {
		t.Fatalf("strategy %+v", s)
	}
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds != 5 {
		t.Fatalf("preStop %+v", c.Lifecycle)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g < 5+10 {
		t.Fatalf("terminationGracePeriodSeconds %v: less than the preStop sleep and the agent's shutdown grace", g)
	}

	d = deployment(t, oidc, "updateStrategy.rollingUpdate.maxUnavailable=1", "updateStrategy.rollingUpdate.maxSurge=25%", "preStopSeconds=0")
	if r := d.Spec.Strategy.RollingUpdate; r == nil || *r.MaxUnavailable != intstr.FromInt32(1) || *r.MaxSurge != intstr.FromString("25%") {
		t.Fatalf("set strategy %+v", d.Spec.Strategy)
	}
	if l := d.Spec.Template.Spec.Containers[0].Lifecycle; l != nil {
		t.Fatalf("preStopSeconds=0 still renders %+v", l)
	}
	d = deployment(t, oidc, "updateStrategy.type=Recreate", "updateStrategy.rollingUpdate=null")
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate != nil {
		t.Fatalf("Recreate: %+v", d.Spec.Strategy)
	}
	if _, err := render(vals(t, oidc, "updateStrategy.type=Sometimes")); err == nil {
		t.Fatal("an unknown strategy rendered")
	}
}
