package gpu

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/schema"
)

// GPM (GPU Performance Monitoring, Hopper and later): SM activity, SM
// occupancy and Tensor activity per GPU and per MIG GPU instance, as the
// difference between two samples, one per poll.

// gpmPair is the two GPM samples kept per GPU or MIG instance between polls.
type gpmPair struct {
	prev, cur nvml.GpmSample
	have      bool // prev holds a sample
}

func (p *gpmPair) free() {
	if p.prev != nil {
		p.prev.Free()
	}
	if p.cur != nil {
		p.cur.Free()
	}
}

// gpmSupported reports whether GPM works on a GPU; NVML is asked once per
// GPU.
func (p *poll) gpmSupported(r *devReader, dev nvml.Device, uuid string) bool {
	c := p.c
	if !c.gpm {
		return false
	}
	ok, asked := c.st.gpmOK[uuid]
	if !asked {
		sup, ret := dev.GpmQueryDeviceSupport()
		ok = r.ok("nvmlGpmQueryDeviceSupport", ret) && sup.IsSupportedDevice != 0
		if ret == nvml.SUCCESS || ret == nvml.ERROR_NOT_SUPPORTED {
			c.st.gpmOK[uuid] = ok
		}
	}
	return ok
}

// gpmRead takes a GPM sample of the GPU (gi < 0) or one GPU instance and,
// given the previous poll's sample, reports the activity in between. The
// first poll only takes a sample.
func (p *poll) gpmRead(r *devReader, u *unit, dev nvml.Device, gi int) []prometheus.Metric {
	c := p.c
	p.seenGPM[u.key] = true
	g := c.st.gpm[u.key]
	if g == nil {
		g = &gpmPair{}
		for _, s := range []*nvml.GpmSample{&g.prev, &g.cur} {
			smp, ret := c.lib.GpmSampleAlloc()
			if !r.ok("nvmlGpmSampleAlloc", ret) {
				g.free()
				return nil
			}
			*s = smp
		}
		c.st.gpm[u.key] = g
	}
	var ret nvml.Return
	fn := "nvmlGpmSampleGet"
	if gi < 0 {
		ret = g.cur.Get(dev)
	} else {
		fn = "nvmlGpmMigSampleGet"
		ret = g.cur.MigGet(dev, gi)
	}
	if !r.ok(fn, ret) {
		g.have = false
		if ret == nvml.ERROR_NOT_SUPPORTED {
			return []prometheus.Metric{p.unsupported(u, schema.GPUSMActive.Name),
				p.unsupported(u, schema.GPUSMOccupancy.Name), p.unsupported(u, schema.GPUTensorActive.Name)}
		}
		return nil
	}
	var out []prometheus.Metric
	if g.have {
		mg := c.st.metrics
		*mg = nvml.GpmMetricsGetType{NumMetrics: 3, Sample1: g.prev, Sample2: g.cur}
		ids := []nvml.GpmMetricId{nvml.GPM_METRIC_SM_UTIL, nvml.GPM_METRIC_SM_OCCUPANCY, nvml.GPM_METRIC_ANY_TENSOR_UTIL}
		fams := []family{c.desc.smActive, c.desc.smOccupancy, c.desc.tensorActive}
		for k, id := range ids {
			mg.Metrics[k].MetricId = uint32(id) // #nosec G115 -- NVML's small enum constants, listed just above
		}
		if ret := c.lib.GpmMetricsGet(mg); r.ok("nvmlGpmMetricsGet", ret) {
			for k := range ids {
				if m := mg.Metrics[k]; m.NvmlReturn == uint32(nvml.SUCCESS) && m.Value >= 0 {
					out = append(out, p.gauge(fams[k], u, m.Value/100))
				}
			}
		}
	}
	g.prev, g.cur = g.cur, g.prev
	g.have = true
	return out
}

// freeGoneGPM frees the GPM samples of instances that are gone (MIG
// reconfigured, GPU lost).
func (p *poll) freeGoneGPM() {
	for k, g := range p.c.st.gpm {
		if !p.seenGPM[k] {
			g.free()
			delete(p.c.st.gpm, k)
		}
	}
}
