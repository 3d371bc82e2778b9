// Package jobinfo exports slurmscope_job_info: one series per SLURM job with
// a process on this node, carrying the job's metadata, so dashboards can
// join any per-job series to its name, owner, account and partition.
//
// The GPU collector emits it with each poll; on a node without GPUs this
// package's Collector does, from the attribution cache (a scrape reads no
// /proc). Both use Desc, so the series are the same either way.
package jobinfo

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

// Desc describes slurmscope_job_info for host.
func Desc(host string) *prometheus.Desc { return promschema.Desc(schema.JobInfo, host, false) }

// Metric is the job's series: one label per job attribute of the schema,
// each value passed through clean (nil: as it is).
func Metric(d *prometheus.Desc, j *attribution.Job, clean func(string) string) prometheus.Metric {
	var values []string
	for _, a := range schema.JobInfo.Attributes {
		if a == schema.HostName {
			continue // a constant label
		}
		v := j.Value(a)
		if clean != nil {
			v = clean(v)
		}
		values = append(values, v)
	}
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, 1, values...)
}

// Jobs is the part of the attribution resolver the collector needs.
type Jobs interface {
	Jobs() []*attribution.Job
}

// Collector serves slurmscope_job_info from the resolver's cache.
type Collector struct {
	jobs Jobs
	host string
	desc *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector for the jobs of host (other slurmd's jobs on the
// same machine are left to their own agents).
func New(jobs Jobs, host string) *Collector {
	return &Collector{jobs: jobs, host: host, desc: Desc(host)}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, j := range c.jobs.Jobs() {
		if j.Host != c.host {
			continue
		}
		ch <- Metric(c.desc, j, nil)
	}
}
