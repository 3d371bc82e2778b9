package gpu

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/jobinfo"
	"github.com/slurmscope/slurmscope/schema"
)

// Metric names are a contract with the dashboards and the datasource: the
// README lists them, and dashboards/dashboards_test.go holds both to them.
const ns = "slurmscope_"

// Labels that are specific to one metric, not attributes of the schema.
const (
	labelPCIBusID      = "pci_bus_id"
	labelMetric        = "metric"
	labelFunction      = "function"
	labelError         = "error"
	labelReason        = "reason"
	labelMIGCompute    = "gpu_mig_compute_instance"
	labelMIGDeviceUUID = "gpu_mig_uuid"
)

// family is one metric name with its two label sets: a whole GPU, and a MIG
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

const unsupportedHelp = "Names a metric NVML does not provide for this GPU or MIG instance (value 1); that series is left out rather than estimated."

func newDescs(host string) descs {
	cl := prometheus.Labels{schema.HostName.Label: host}
	gpuL := []string{schema.GPUUUID.Label, schema.GPUIndex.Label, schema.GPUName.Label}
	migL := append(append([]string(nil), gpuL...), schema.GPUMIGProfile.Label, schema.GPUMIGInstance.Label)
	jobL := []string{schema.JobID.Label, schema.JobUser.Label, schema.JobName.Label}
	fam := func(name, help string, labels []string, typ prometheus.ValueType) family {
		return family{
			gpu: prometheus.NewDesc(ns+name, help, labels, cl),
			mig: prometheus.NewDesc(ns+name, help, append(append([]string(nil), labels...), schema.GPUMIGProfile.Label, schema.GPUMIGInstance.Label), cl),
			typ: typ,
		}
	}
	g := func(name, help string) family { return fam(name, help, gpuL, prometheus.GaugeValue) }
	j := func(name, help string) family {
		return fam(name, help, append(append([]string(nil), jobL...), gpuL...), prometheus.GaugeValue)
	}
	return descs{
		info: prometheus.NewDesc(ns+"gpu_info", "A GPU on this node (value 1), with its PCI bus id.",
			append(append([]string(nil), gpuL...), labelPCIBusID), cl),
		migInfo: prometheus.NewDesc(ns+"gpu_mig_info", "A MIG device (GPU instance and compute instance) on this node (value 1).",
			append(append([]string(nil), migL...), labelMIGCompute, labelMIGDeviceUUID), cl),
		healthy: prometheus.NewDesc(ns+"gpu_healthy", "1 when the GPU answered NVML this poll; 0 when it is lost (fallen off the bus) or failed. Labels of a lost GPU are its last known ones.",
			gpuL, cl),
		unsupported: family{
			gpu: prometheus.NewDesc(ns+"gpu_unsupported_info", unsupportedHelp, append(append([]string(nil), gpuL...), labelMetric), cl),
			mig: prometheus.NewDesc(ns+"gpu_unsupported_info", unsupportedHelp, append(append([]string(nil), migL...), labelMetric), cl),
			typ: prometheus.GaugeValue,
		},

		util:         g("gpu_utilization_ratio", "Fraction of the last sample period in which a kernel ran on the GPU (NVML utilization.gpu)."),
		memUtil:      g("gpu_memory_utilization_ratio", "Fraction of the last sample period in which device memory was read or written (NVML utilization.memory); not memory occupancy."),
		memUsed:      g("gpu_memory_used_bytes", "Device memory in use (of the GPU, or of the MIG instance)."),
		memTotal:     g("gpu_memory_total_bytes", "Device memory (of the GPU, or of the MIG instance)."),
		power:        g("gpu_power_watts", "Power draw of the GPU board."),
		temp:         g("gpu_temperature_celsius", "GPU die temperature."),
		clock:        g("gpu_sm_clock_hertz", "Current SM clock."),
		smActive:     g("gpu_sm_active_ratio", "Fraction of SMs busy between the last two polls (GPM, Hopper and later)."),
		smOccupancy:  g("gpu_sm_occupancy_ratio", "Fraction of resident warps of the theoretical maximum between the last two polls (GPM)."),
		tensorActive: g("gpu_tensor_active_ratio", "Fraction of time any tensor core was active between the last two polls (GPM)."),

		jobInfo:    jobinfo.Desc(host),
		jobUtil:    j("job_gpu_utilization_ratio", "Sum of the SM utilisation of the job's processes on the GPU since the last poll (NVML process utilisation); 0 for an allocated idle GPU."),
		jobMemUtil: j("job_gpu_memory_utilization_ratio", "Sum of the memory-bandwidth utilisation of the job's processes on the GPU since the last poll."),
		jobMemUsed: j("job_gpu_memory_used_bytes", "Device memory used by the job's processes on the GPU or MIG instance."),
		jobAlloc:   j("job_gpu_allocated", "1 for each GPU or MIG instance allocated to the job, as its tasks' environment says."),

		pollDuration: prometheus.NewDesc(ns+"gpu_poll_duration_seconds", "Duration of the last GPU poll.", nil, cl),
		lastPoll:     prometheus.NewDesc(ns+"gpu_last_poll_timestamp_seconds", "Start of the last GPU poll, Unix time.", nil, cl),
		polls:        prometheus.NewDesc(ns+"gpu_polls_total", "GPU polls done.", nil, cl),
		nvmlErrors: prometheus.NewDesc(ns+"gpu_nvml_errors_total", "NVML calls that failed, by C function and error. ERROR_NOT_SUPPORTED is not counted.",
			[]string{labelFunction, labelError}, cl),
		allocErrors: prometheus.NewDesc(ns+"gpu_allocation_errors_total", "GPU allocation entries in tasks' environments that were not used: malformed, naming no GPU here, or an ordinal that is ambiguous on a MIG node.",
			[]string{labelReason}, cl),
	}
}
