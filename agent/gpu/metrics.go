package gpu

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/jobinfo"
	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

// family is one metric with its two label sets: a whole GPU, and a MIG
// instance (two more labels).
type family struct {
	gpu, mig *prometheus.Desc
	typ      prometheus.ValueType
}

type descs struct {
	// Per GPU or MIG instance.
	info, migInfo, healthy                               *prometheus.Desc
	unsupported                                          family
	util, memUtil, memUsed, memTotal, power, temp, clock family
	smActive, smOccupancy, tensorActive                  family
	// Per job.
	jobInfo                                   *prometheus.Desc
	jobUtil, jobMemUtil, jobMemUsed, jobAlloc family
	// Self.
	pollDuration, lastPoll, polls, nvmlErrors, allocErrors *prometheus.Desc
}

// newDescs describes the collector's metrics from their definitions in
// package schema, which also holds their help and labels.
func newDescs(host string) descs {
	fam := func(m schema.Metric) family {
		return family{gpu: promschema.Desc(m, host, false), mig: promschema.Desc(m, host, true), typ: promschema.ValueType(m)}
	}
	desc := func(m schema.Metric) *prometheus.Desc { return promschema.Desc(m, host, false) }
	return descs{
		info:        desc(schema.GPUInfo),
		migInfo:     desc(schema.GPUMIGInfo),
		healthy:     desc(schema.GPUHealthy),
		unsupported: fam(schema.GPUUnsupported),

		util:         fam(schema.GPUUtilization),
		memUtil:      fam(schema.GPUMemoryUtilization),
		memUsed:      fam(schema.GPUMemoryUsed),
		memTotal:     fam(schema.GPUMemoryTotal),
		power:        fam(schema.GPUPower),
		temp:         fam(schema.GPUTemperature),
		clock:        fam(schema.GPUSMClock),
		smActive:     fam(schema.GPUSMActive),
		smOccupancy:  fam(schema.GPUSMOccupancy),
		tensorActive: fam(schema.GPUTensorActive),

		jobInfo:    jobinfo.Desc(host),
		jobUtil:    fam(schema.JobGPUUtilization),
		jobMemUtil: fam(schema.JobGPUMemoryUtilization),
		jobMemUsed: fam(schema.JobGPUMemoryUsed),
		jobAlloc:   fam(schema.JobGPUAllocated),

		pollDuration: desc(schema.GPUPollDuration),
		lastPoll:     desc(schema.GPULastPoll),
		polls:        desc(schema.GPUPolls),
		nvmlErrors:   desc(schema.GPUNVMLErrors),
		allocErrors:  desc(schema.GPUAllocationErrors),
	}
}
