package attribution

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

// Collector exports what attribution refused: look-alike cgroup paths by
// reason, and SLUID jobs whose id was another job's.
type Collector struct {
	r                  *Resolver
	refused, conflicts *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the resolver's collector.
func NewCollector(r *Resolver) *Collector {
	return &Collector{r: r,
		refused:   promschema.Desc(schema.AgentCgroupRefused, "", false),
		conflicts: promschema.Desc(schema.AgentJobIDConflicts, "", false)}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.refused; ch <- c.conflicts }

// Collect implements prometheus.Collector. Every reason is exported, so
// that rate() sees the first refusal.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.r.Stats()
	for _, reason := range refusedReasons {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(st.Refused[reason]), reason)
	}
	ch <- prometheus.MustNewConstMetric(c.conflicts, prometheus.CounterValue, float64(st.IDConflicts))
}
