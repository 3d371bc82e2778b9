package promschema

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slurmscope/slurmscope/schema"
)

func TestDescFixesTheHost(t *testing.T) {
	d := Desc(schema.JobGPUAllocated, "node-a", true)
	m := prometheus.MustNewConstMetric(d, ValueType(schema.JobGPUAllocated), 1, "42", "bob", "train", "GPU-1", "0", "H100", "3g.40gb", "2")
	c := collector{d, m}
	want := `# HELP slurmscope_job_gpu_allocated ` + schema.JobGPUAllocated.Help + `
# TYPE slurmscope_job_gpu_allocated gauge
slurmscope_job_gpu_allocated{gpu_index="0",gpu_mig_instance="2",gpu_mig_profile="3g.40gb",gpu_name="H100",gpu_uuid="GPU-1",host_name="node-a",slurm_job_id="42",slurm_job_name="train",slurm_job_user="bob"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if ValueType(schema.GPUPolls) != prometheus.CounterValue {
		t.Error("a counter is not a counter")
	}
}

// Code that uses a definition as what it is not fails at construction.
func TestMismatchPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"gauge as counter":      func() { Counter(schema.AgentSampledCPUs) },
		"vector as counter":     func() { Counter(schema.AgentErrors) },
		"counter as vector":     func() { CounterVec(schema.AgentCPUSamples) },
		"attributes as counter": func() { Counter(schema.GPUPolls) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

type collector struct {
	d *prometheus.Desc
	m prometheus.Metric
}

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.d }
func (c collector) Collect(ch chan<- prometheus.Metric) { ch <- c.m }

func TestReaderEmitsWhatItReads(t *testing.T) {
	n := 0.0
	r := Reader([]schema.Metric{schema.AgentInterpSkipped}, func(emit func(schema.Metric, float64, ...string)) {
		n++
		emit(schema.AgentInterpSkipped, n, "python", "not_python")
	})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(r)
	for want := 1.0; want <= 2; want++ {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if len(fams) != 1 || fams[0].GetName() != schema.AgentInterpSkipped.Name || fams[0].GetMetric()[0].GetCounter().GetValue() != want {
			t.Fatalf("gather %v: %v", want, fams)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("a metric outside defs was emitted without a panic")
		}
	}()
	Reader(nil, func(emit func(schema.Metric, float64, ...string)) { emit(schema.AgentInterpSkipped, 1, "a", "b") }).Collect(make(chan prometheus.Metric, 1))
}
