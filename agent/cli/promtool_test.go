package cli

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/schema"
)

// TestMetricsPassPromtool runs `promtool check metrics` (Prometheus's own
// linter: base units, suffixes, help) on every metric of the schema, one
// series each with every label it carries, in the exposition format
// /metrics serves. TestAgentExportsTheSchemasMetrics holds what the
// agent's collectors export to the schema (name, help, type, labels), so
// this covers every metric the agent exports, vectors without series yet
// included. (A counter of nanoseconds, for one, fails with `use base unit
// "seconds" instead of "nanoseconds"`.)
func TestMetricsPassPromtool(t *testing.T) {
	testenv.Require(t, testenv.Tools("promtool"))
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(schemaSeries{})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	if len(fams) != len(schema.Metrics) {
		t.Fatalf("%d families for %d metrics", len(fams), len(schema.Metrics))
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = &buf
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// schemaSeries serves one series of every metric of the schema, with every
// label it carries.
type schemaSeries struct{}

func (schemaSeries) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range schema.Metrics {
		ch <- prometheus.NewDesc(m.Name, m.Help, m.LabelNames(true), nil)
	}
}

func (schemaSeries) Collect(ch chan<- prometheus.Metric) {
	for _, m := range schema.Metrics {
		labels := m.LabelNames(true)
		values := make([]string, len(labels))
		for i, l := range labels {
			values[i] = strings.ToUpper(l[:1]) + "x"
		}
		desc := prometheus.NewDesc(m.Name, m.Help, labels, nil)
		switch m.Type {
		case schema.Histogram:
			buckets := map[float64]uint64{}
			for i, le := range m.Buckets {
				buckets[le] = uint64(i)
			}
			ch <- prometheus.MustNewConstHistogram(desc, uint64(len(m.Buckets)), 1, buckets, values...)
		case schema.Counter:
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, 1, values...)
		default:
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, 1, values...)
		}
	}
}
