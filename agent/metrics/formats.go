package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// formatsFunc says the newest record format the shared store reads, the
// one it writes now and the live agents by the formats they read.
type formatsFunc func() (read, write int, agents map[string]int)

// storeFormats exports signagent_store_format{direction} and
// signagent_store_agents{reads} while the agent has a shared store, and
// nothing without one.
type storeFormats struct {
	f      atomic.Pointer[formatsFunc]
	format *prometheus.Desc
	agents *prometheus.Desc
}

func newStoreFormats() *storeFormats {
	return &storeFormats{
		format: prometheus.NewDesc("signagent_store_format",
			"The shared store's record format by direction: read, the newest this agent reads; write, the one it writes now (the highest every live agent reads; docs/upgrading.md).",
			[]string{"direction"}, nil),
		agents: prometheus.NewDesc("signagent_store_agents",
			"Live agents that announced on the shared store the record formats they read, by those formats (\"1,2,3\"), this one included; agents before the announcements are not counted.",
			[]string{"reads"}, nil),
	}
}

func (c *storeFormats) Describe(ch chan<- *prometheus.Desc) { ch <- c.format; ch <- c.agents }

func (c *storeFormats) Collect(ch chan<- prometheus.Metric) {
	f := c.f.Load()
	if f == nil {
		return
	}
	read, write, agents := (*f)()
	ch <- prometheus.MustNewConstMetric(c.format, prometheus.GaugeValue, float64(read), "read")
	ch <- prometheus.MustNewConstMetric(c.format, prometheus.GaugeValue, float64(write), "write")
	for reads, n := range agents {
		ch <- prometheus.MustNewConstMetric(c.agents, prometheus.GaugeValue, float64(n), reads)
	}
}

// StoreFormats has the metrics report the shared store's formats through
// f (nil: no shared store).
func (m *Metrics) StoreFormats(f func() (read, write int, agents map[string]int)) {
	if f == nil {
		m.formats.f.Store(nil)
		return
	}
	ff := formatsFunc(f)
	m.formats.f.Store(&ff)
}
