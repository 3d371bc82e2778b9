package promql

import (
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/schema"
)

func sel(ms ...filter.Matcher) filter.Selector { return ms }

func eq(a schema.Attribute, v string) filter.Matcher {
	return filter.Matcher{Label: a.Label, Op: filter.OpEqual, Value: v}
}

func TestBuild(t *testing.T) {
	util, _ := Lookup("slurmscope_job_gpu_utilization_ratio")
	sm, _ := Lookup("slurmscope_gpu_sm_active_ratio")
	for _, tc := range []struct {
		name string
		q    Query
		want string
	}{
		{"nothing matches", Query{Metric: util, Agg: Avg}, ""},
		{"everything, merged across nodes", Query{Metric: util, Agg: Avg, Selectors: []filter.Selector{{}}},
			`avg by () (slurmscope_job_gpu_utilization_ratio)`},
		{"per user over 30 minutes", Query{Metric: util, Agg: Avg, GroupBy: []string{schema.JobUser.Label}, Window: 30 * time.Minute,
			Selectors: []filter.Selector{sel(eq(schema.JobID, "42"))}},
			`avg by (slurm_job_user) (avg_over_time(slurmscope_job_gpu_utilization_ratio{slurm_job_id="42"}[1800s]))`},
		{"disjoint selectors are a union", Query{Metric: util, Agg: Max, GroupBy: []string{schema.HostName.Label},
			Selectors: []filter.Selector{sel(eq(schema.JobID, "1")), sel(eq(schema.JobID, "2"))}},
			`max by (host_name) (slurmscope_job_gpu_utilization_ratio{slurm_job_id="1"} or slurmscope_job_gpu_utilization_ratio{slurm_job_id="2"})`},
		{"hostile value stays a value", Query{Metric: util, Agg: Sum,
			Selectors: []filter.Selector{sel(eq(schema.JobUser, "x\"} or vector(1) #"))}},
			`sum by () (slurmscope_job_gpu_utilization_ratio{slurm_job_user="x\"} or vector(1) #"})`},
		{"GPU metric without job labels", Query{Metric: sm, Agg: Avg,
			Selectors: []filter.Selector{sel(eq(schema.HostName, "n1"))}},
			`avg by () (slurmscope_gpu_sm_active_ratio{host_name="n1"})`},
		{"GPU metric reached through the allocation", Query{Metric: sm, Agg: Avg, GroupBy: []string{schema.JobID.Label},
			Selectors: []filter.Selector{sel(eq(schema.HostName, "n1"), eq(schema.JobUser, "bob"))}},
			`avg by (slurm_job_id) ((slurmscope_gpu_sm_active_ratio{host_name="n1"} * on (host_name, gpu_uuid, gpu_mig_instance) group_right () ` +
				`max by (gpu_index, host_name, gpu_uuid, gpu_mig_instance, slurm_job_id, slurm_job_user, slurm_job_name) ` +
				`(slurmscope_job_gpu_allocated{slurm_job_user="bob", host_name="n1"} == 1)))`},
		{"a counter as a rate", Query{Metric: Of(schema.HostCPUUsage.Step), Agg: Sum, GroupBy: []string{schema.JobStep.Label}, Rate: time.Minute,
			Selectors: []filter.Selector{sel(eq(schema.JobID, "7"))}},
			`sum by (slurm_job_step) (rate(slurmscope_job_step_cpu_usage_seconds_total{slurm_job_id="7"}[60s]))`},
		{"a metric the editor does not offer", Query{Metric: Of(schema.JobLastSeen), Agg: Min, GroupBy: []string{schema.JobID.Label}, Window: time.Hour,
			Selectors: []filter.Selector{{}}},
			`min by (slurm_job_id) (min_over_time(slurmscope_job_last_seen_timestamp_seconds[3600s]))`},
	} {
		if got := Build(tc.q); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestMatchersAndDuration(t *testing.T) {
	if got, want := Matchers(sel(eq(schema.JobID, "7"))), `{__name__=~"slurmscope_.+", slurm_job_id="7"}`; got != want {
		t.Errorf("Matchers = %s, want %s", got, want)
	}
	if got := Duration(90 * time.Second); got != "90s" {
		t.Errorf("Duration = %s", got)
	}
	if got := Duration(1500 * time.Millisecond); got != "1500ms" {
		t.Errorf("Duration = %s", got)
	}
	if _, err := ParseAgg("stddev", Avg); err == nil {
		t.Error("ParseAgg accepted stddev")
	}
	if _, ok := Lookup("up"); ok {
		t.Error("Lookup accepted a metric that is not the agent's")
	}
}
