package promschema

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/slurmscope/slurmscope/schema"
)

// ScaledCounter counts whole units (nanoseconds) in an integer and exports
// them in m's base unit (seconds), dividing once, at export: the sum stays
// exact however many values are added, which a float counter of seconds
// would not (every addition of a fraction rounds).
type ScaledCounter struct {
	desc    *prometheus.Desc
	perUnit float64 // units per base unit: 1e9 for ns -> s
	labels  []string
	v       atomic.Uint64
}

var _ prometheus.Counter = (*ScaledCounter)(nil)

// NewScaledCounter returns a counter for m, a counter without labels,
// counting units of which perUnit make one of m's base unit.
func NewScaledCounter(m schema.Metric, perUnit float64) *ScaledCounter {
	check(m, schema.Counter, false)
	return &ScaledCounter{desc: Desc(m, "", false), perUnit: perUnit}
}

// Add adds v units, rounded to a whole one; negative values panic, as a
// counter's do.
func (c *ScaledCounter) Add(v float64) {
	if v < 0 {
		panic("promschema: counter cannot decrease in value")
	}
	c.v.Add(uint64(math.Round(v)))
}

// Inc adds one unit.
func (c *ScaledCounter) Inc() { c.v.Add(1) }

// Units is the count, in units.
func (c *ScaledCounter) Units() uint64 { return c.v.Load() }

// Desc implements prometheus.Metric.
func (c *ScaledCounter) Desc() *prometheus.Desc { return c.desc }

// Write implements prometheus.Metric.
func (c *ScaledCounter) Write(out *dto.Metric) error {
	return prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.v.Load())/c.perUnit, c.labels...).Write(out)
}

// Describe implements prometheus.Collector.
func (c *ScaledCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *ScaledCounter) Collect(ch chan<- prometheus.Metric) { ch <- c }

// ScaledCounterVec is ScaledCounter by m's own labels.
type ScaledCounterVec struct {
	desc    *prometheus.Desc
	perUnit float64
	mu      sync.Mutex
	byKey   map[string]*ScaledCounter
	order   []string
}

// NewScaledCounterVec returns a counter vector for m, a counter whose labels
// are its own.
func NewScaledCounterVec(m schema.Metric, perUnit float64) *ScaledCounterVec {
	check(m, schema.Counter, true)
	return &ScaledCounterVec{desc: Desc(m, "", false), perUnit: perUnit, byKey: map[string]*ScaledCounter{}}
}

// WithLabelValues returns the counter of the label values.
func (v *ScaledCounterVec) WithLabelValues(lvs ...string) prometheus.Counter {
	key := ""
	for _, l := range lvs {
		key += l + "\xff"
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	c := v.byKey[key]
	if c == nil {
		c = &ScaledCounter{desc: v.desc, perUnit: v.perUnit, labels: append([]string(nil), lvs...)}
		v.byKey[key] = c
		v.order = append(v.order, key)
	}
	return c
}

// Describe implements prometheus.Collector.
func (v *ScaledCounterVec) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

// Collect implements prometheus.Collector.
func (v *ScaledCounterVec) Collect(ch chan<- prometheus.Metric) {
	v.mu.Lock()
	cs := make([]*ScaledCounter, 0, len(v.order))
	for _, k := range v.order {
		cs = append(cs, v.byKey[k])
	}
	v.mu.Unlock()
	for _, c := range cs {
		ch <- c
	}
}
