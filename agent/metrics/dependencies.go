package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// The shared dependencies, as signagent_dependency_up labels them: a fixed
// set.
const (
	DependencyStore   = "store"
	DependencyService = "service"
	DependencyIdP     = "idp"
)

// Dependencies has up, what the agent last saw of each shared dependency
// (true: up), exported at every scrape as signagent_store_up (while a
// shared store is configured) and signagent_dependency_up{dependency}
// (for each dependency seen: the store from its probe, the service and
// the identity provider once called). Names outside the fixed set are
// not exported. Called once, before the first scrape.
func (m *Metrics) Dependencies(up func() map[string]bool) {
	m.reg.MustRegister(dependencyCollector{up})
}

var (
	storeUpDesc = prometheus.NewDesc("signagent_store_up",
		"1 when the shared store answers and takes writes (the agent's probe, every second), 0 when not; absent without a shared store.", nil, nil)
	dependencyUpDesc = prometheus.NewDesc("signagent_dependency_up",
		"1 when a shared dependency (store, service, idp: the identity provider) worked when last used, 0 when not; a dependency not used yet is absent. None of them makes the agent not ready (/readyz answers degraded).",
		[]string{"dependency"}, nil)
	dependencyNames = []string{DependencyStore, DependencyService, DependencyIdP}
)

type dependencyCollector struct{ up func() map[string]bool }

func (c dependencyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- storeUpDesc
	ch <- dependencyUpDesc
}

func (c dependencyCollector) Collect(ch chan<- prometheus.Metric) {
	for name, up := range c.up() {
		if !slices.Contains(dependencyNames, name) {
			continue
		}
		v := 0.0
		if up {
			v = 1
		}
		if name == DependencyStore {
			ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, v)
		}
		ch <- prometheus.MustNewConstMetric(dependencyUpDesc, prometheus.GaugeValue, v, name)
	}
}
