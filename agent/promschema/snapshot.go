package promschema

import (
	"cmp"
	"slices"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Snapshot holds the metrics of a collector's last poll, which its Collect
// sends as they are: a scrape then does none of the poll's work (no NVML
// call, no file read), and scrapers cannot multiply it. The zero value
// holds no metric.
type Snapshot struct {
	p atomic.Pointer[[]prometheus.Metric]
}

// Store replaces the metrics a scrape sends.
func (s *Snapshot) Store(ms []prometheus.Metric) { s.p.Store(&ms) }

// Collect sends the last Store's metrics.
func (s *Snapshot) Collect(ch chan<- prometheus.Metric) {
	if p := s.p.Load(); p != nil {
		for _, m := range *p {
			ch <- m
		}
	}
}

// CollectCounts sends one counter of desc per key of counts, in key order,
// the key's two strings being the values of desc's two variable labels:
// what a poll counted by (function, error) or (file, reason).
func CollectCounts(ch chan<- prometheus.Metric, desc *prometheus.Desc, counts map[[2]string]uint64) {
	keys := make([][2]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	for _, k := range keys {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(counts[k]), k[0], k[1])
	}
}
