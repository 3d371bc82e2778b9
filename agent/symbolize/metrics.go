package symbolize

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

var descErrors = promschema.Desc(schema.AgentSymbolizeErrors, "", false)

// Collector exports the symbolizer's error counters, one series per kind.
func (s *Symbolizer) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Symbolizer }

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- descErrors }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	errs := c.s.Stats().Errors
	for _, k := range ErrorKinds {
		ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(errs[k]), string(k))
	}
}
