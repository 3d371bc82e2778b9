package elfcheck

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

// A Reader is one of the agent's readers of files a job names (the
// symbolizer, the unwinder's table builder, an interpreter's reader): it
// opens them through Open, and its refusals are counted under its name.
type Reader struct {
	name             string
	tooLarge, panics atomic.Uint64
}

var (
	readersMu sync.Mutex
	readers   []*Reader
)

// NewReader registers a reader; name is its metric label. Each package
// that reads job files makes one, once.
func NewReader(name string) *Reader {
	readersMu.Lock()
	defer readersMu.Unlock()
	r := &Reader{name: name}
	readers = append(readers, r)
	return r
}

// Counts are a reader's refusals since start.
type Counts struct{ TooLarge, Panics uint64 }

// Counts returns the reader's refusals.
func (c *Reader) Counts() Counts { return Counts{TooLarge: c.tooLarge.Load(), Panics: c.panics.Load()} }

var descRefused = promschema.Desc(schema.AgentELFRefused, "", false)

// Collector exports every reader's refusals, one series per reader and
// reason, zeros included.
func Collector() prometheus.Collector { return collector{} }

type collector struct{}

func (collector) Describe(ch chan<- *prometheus.Desc) { ch <- descRefused }

func (collector) Collect(ch chan<- prometheus.Metric) {
	readersMu.Lock()
	rs := slices.Clone(readers)
	readersMu.Unlock()
	// A name registered twice (tests) is one series.
	sum := map[string]*Counts{}
	var names []string
	for _, r := range rs {
		c := sum[r.name]
		if c == nil {
			c = &Counts{}
			sum[r.name] = c
			names = append(names, r.name)
		}
		n := r.Counts()
		c.TooLarge += n.TooLarge
		c.Panics += n.Panics
	}
	for _, name := range names {
		c := sum[name]
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(c.TooLarge), name, "too_large")
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(c.Panics), name, "panic")
	}
}
