package budget

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

// Collector exports the budget's and the read allowance's numbers; w may
// be nil.
type Collector struct {
	b *Budget
	w *Work
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the collector of b and w.
func NewCollector(b *Budget, w *Work) *Collector { return &Collector{b: b, w: w} }

var (
	descTotal    = promschema.Desc(schema.AgentMemoryBudget, "", false)
	descUsed     = promschema.Desc(schema.AgentMemoryBudgetUsed, "", false)
	descEvict    = promschema.Desc(schema.AgentMemoryBudgetEvictions, "", false)
	descEvictB   = promschema.Desc(schema.AgentMemoryBudgetEvictedBytes, "", false)
	descRefused  = promschema.Desc(schema.AgentMemoryBudgetRefused, "", false)
	descDeferred = promschema.Desc(schema.AgentJobFileReadsDeferred, "", false)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTotal, descUsed, descEvict, descEvictB, descRefused, descDeferred} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.b.Stats()
	ch <- prometheus.MustNewConstMetric(descTotal, prometheus.GaugeValue, float64(st.Total))
	for _, k := range Kinds {
		ks := st.Kinds[k]
		ch <- prometheus.MustNewConstMetric(descUsed, prometheus.GaugeValue, float64(ks.Used), string(k))
		ch <- prometheus.MustNewConstMetric(descEvict, prometheus.CounterValue, float64(ks.Evictions), string(k))
		ch <- prometheus.MustNewConstMetric(descEvictB, prometheus.CounterValue, float64(ks.EvictedBytes), string(k))
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(ks.Refused), string(k))
	}
	ch <- prometheus.MustNewConstMetric(descDeferred, prometheus.CounterValue, float64(c.w.Denied()))
}
