package gpu

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/schema"
)

// unit is a GPU or a MIG GPU instance as seen by this poll.
type unit struct {
	key      unitKey
	labels   []string // gpu_uuid, gpu_index, gpu_name[, gpu_mig_profile, gpu_mig_instance]
	mig      bool
	procUtil bool // NVML gives per-process utilisation here
}

type poll struct {
	c   *Collector
	out []prometheus.Metric

	units map[unitKey]*unit
	topo  topology
	devs  *nodeDevices

	procs    map[int]attribution.Process // from the job scan
	jobs     map[string]*attribution.Job
	jobTasks map[string][]attribution.Process
	uses     map[string]map[unitKey]*use // job id -> unit -> use
	seenGPM  map[unitKey]bool
}

func newPoll(c *Collector) *poll {
	return &poll{c: c,
		units: map[unitKey]*unit{},
		topo: topology{byMinor: map[int]string{}, byUUID: map[string]unitKey{}, migEnabled: map[string]bool{},
			units: map[unitKey]bool{}},
		procs: map[int]attribution.Process{}, jobs: map[string]*attribution.Job{},
		jobTasks: map[string][]attribution.Process{}, uses: map[string]map[unitKey]*use{},
		seenGPM: map[unitKey]bool{},
	}
}

func (p *poll) run(ctx context.Context) error {
	var scanErr error
	if p.c.o.Jobs != nil {
		scanErr = p.scanJobs()
	}
	n, ret := p.c.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		p.c.countNVML("nvmlDeviceGetCount_v2", ret)
		return fmt.Errorf("nvmlDeviceGetCount: %s", retName(ret))
	}
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		p.device(i)
	}
	p.freeGoneGPM()
	if p.c.o.Jobs != nil {
		p.devs = &nodeDevices{}
		if p.c.o.Grants != nil {
			p.devs = p.nodeDevices()
		}
		p.emitJobs(ctx)
	}
	return scanErr
}

// devReader reads one device, remembering whether it was lost.
type devReader struct {
	p    *poll
	lost bool
	bad  bool // a call that must succeed failed
}

// ok reports whether ret is SUCCESS. NOT_SUPPORTED is an answer, not an
// error, and is not counted; any other failure is.
func (r *devReader) ok(fn string, ret nvml.Return) bool {
	switch ret {
	case nvml.SUCCESS:
		return true
	case nvml.ERROR_NOT_SUPPORTED:
		return false
	case nvml.ERROR_GPU_IS_LOST:
		r.lost = true
	}
	r.p.c.countNVML(fn, ret)
	return false
}

func (p *poll) gauge(f family, u *unit, v float64) prometheus.Metric {
	d := f.gpu
	if u.mig {
		d = f.mig
	}
	return prometheus.MustNewConstMetric(d, f.typ, v, u.labels...)
}

func (p *poll) unsupported(u *unit, metric string) prometheus.Metric {
	f := p.c.desc.unsupported
	d := f.gpu
	if u.mig {
		d = f.mig
	}
	return prometheus.MustNewConstMetric(d, f.typ, 1, append(u.labels[:len(u.labels):len(u.labels)], metric)...)
}

// device reads GPU i and its MIG instances. The series of a GPU that is
// lost part-way are dropped: only its health is reported.
func (p *poll) device(i int) {
	c := p.c
	idx := strconv.Itoa(i)
	r := &devReader{p: p}
	health := func(v float64) {
		k := c.st.known[i]
		p.out = append(p.out, prometheus.MustNewConstMetric(c.desc.healthy, prometheus.GaugeValue, v, k.uuid, idx, k.name))
	}
	dev, ret := c.lib.DeviceGetHandleByIndex(i)
	if !r.ok("nvmlDeviceGetHandleByIndex_v2", ret) {
		health(0)
		return
	}
	uuid, ret := dev.GetUUID()
	if !r.ok("nvmlDeviceGetUUID", ret) || uuid == "" {
		health(0)
		return
	}
	uuid = cleanLabel(uuid)
	name, ret := dev.GetName()
	if !r.ok("nvmlDeviceGetName", ret) && r.lost {
		health(0)
		return
	}
	name = cleanLabel(name)
	c.st.known[i] = deviceLabels{uuid, name}
	u := &unit{key: unitKey{uuid, -1}, labels: []string{uuid, idx, name}}
	var out []prometheus.Metric
	emit := func(m prometheus.Metric) { out = append(out, m) }

	if pci, ret := dev.GetPciInfo(); r.ok("nvmlDeviceGetPciInfo_v3", ret) {
		emit(prometheus.MustNewConstMetric(c.desc.info, prometheus.GaugeValue, 1, uuid, idx, name, cleanLabel(cstr(pci.BusId[:]))))
	} else {
		emit(prometheus.MustNewConstMetric(c.desc.info, prometheus.GaugeValue, 1, uuid, idx, name, ""))
	}
	minor, ret := dev.GetMinorNumber()
	if !r.ok("nvmlDeviceGetMinorNumber", ret) {
		minor = i
	}
	if ut, ret := dev.GetUtilizationRates(); r.ok("nvmlDeviceGetUtilizationRates", ret) {
		emit(p.gauge(c.desc.util, u, float64(ut.Gpu)/100))
		emit(p.gauge(c.desc.memUtil, u, float64(ut.Memory)/100))
	} else if ret == nvml.ERROR_NOT_SUPPORTED {
		emit(p.unsupported(u, schema.GPUUtilization.Name))
		emit(p.unsupported(u, schema.GPUMemoryUtilization.Name))
	}
	if mem, ret := dev.GetMemoryInfo(); r.ok("nvmlDeviceGetMemoryInfo", ret) {
		emit(p.gauge(c.desc.memUsed, u, float64(mem.Used)))
		emit(p.gauge(c.desc.memTotal, u, float64(mem.Total)))
	}
	if mw, ret := dev.GetPowerUsage(); r.ok("nvmlDeviceGetPowerUsage", ret) {
		emit(p.gauge(c.desc.power, u, float64(mw)/1000))
	}
	if t, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU); r.ok("nvmlDeviceGetTemperature", ret) {
		emit(p.gauge(c.desc.temp, u, float64(t)))
	}
	if mhz, ret := dev.GetClockInfo(nvml.CLOCK_SM); r.ok("nvmlDeviceGetClockInfo", ret) {
		emit(p.gauge(c.desc.clock, u, float64(mhz)*1e6))
	}
	if r.lost {
		health(0)
		return
	}

	gpmOK := p.gpmSupported(r, dev, uuid)
	if gpmOK {
		out = append(out, p.gpmRead(r, u, dev, -1)...)
	}

	migOn := false
	var migs []*unit
	if c.mig {
		cur, _, ret := dev.GetMigMode()
		migOn = r.ok("nvmlDeviceGetMigMode", ret) && cur == nvml.DEVICE_MIG_ENABLE
	}
	if migOn {
		var mout []prometheus.Metric
		migs, mout = p.migInstances(r, dev, u, gpmOK)
		out = append(out, mout...)
	}
	if r.lost {
		health(0)
		return
	}

	p.processes(r, dev, u, migs, migOn)
	if r.lost {
		health(0)
		return
	}
	// Only now, with the GPU known to be readable, does it join the node's
	// topology: a lost GPU is allocated to no one this poll.
	p.units[u.key] = u
	p.topo.units[u.key] = true
	p.topo.byUUID[uuid] = u.key
	p.topo.byMinor[minor] = uuid
	p.topo.migEnabled[uuid] = migOn
	p.topo.anyMIG = p.topo.anyMIG || migOn
	for _, m := range migs {
		p.units[m.key] = m
		p.topo.units[m.key] = true
	}
	p.out = append(p.out, out...)
	health(1)
}

// migInstances enumerates the MIG devices of a GPU. A GPU instance may
// hold several compute instances, each its own MIG device with its own
// UUID; memory and GPM belong to the GPU instance, so the series are per
// GPU instance and only gpu_mig_info lists the compute instances.
func (p *poll) migInstances(r *devReader, dev nvml.Device, parent *unit, gpmOK bool) ([]*unit, []prometheus.Metric) {
	c := p.c
	var out []prometheus.Metric
	var units []*unit
	byGI := map[int]*unit{}
	n, ret := dev.GetMaxMigDeviceCount()
	if !r.ok("nvmlDeviceGetMaxMigDeviceCount", ret) {
		return nil, nil
	}
	for k := 0; k < n && !r.lost; k++ {
		md, ret := dev.GetMigDeviceHandleByIndex(k)
		if ret == nvml.ERROR_NOT_FOUND {
			continue // an empty slot
		}
		if !r.ok("nvmlDeviceGetMigDeviceHandleByIndex", ret) {
			continue
		}
		muuid, ret := md.GetUUID()
		if !r.ok("nvmlDeviceGetUUID", ret) {
			continue
		}
		gi, ret := md.GetGpuInstanceId()
		if !r.ok("nvmlDeviceGetGpuInstanceId", ret) {
			continue
		}
		ci, ret := md.GetComputeInstanceId()
		if !r.ok("nvmlDeviceGetComputeInstanceId", ret) {
			ci = -1
		}
		mname, ret := md.GetName()
		profile := "unknown"
		if r.ok("nvmlDeviceGetName", ret) {
			profile = migProfile(mname)
		}
		muuid = cleanLabel(muuid)
		giS := strconv.Itoa(gi)
		ciS := ""
		if ci >= 0 {
			ciS = strconv.Itoa(ci)
		}
		out = append(out, prometheus.MustNewConstMetric(c.desc.migInfo, prometheus.GaugeValue, 1,
			parent.labels[0], parent.labels[1], parent.labels[2], profile, giS, ciS, muuid))
		key := unitKey{parent.key.uuid, gi}
		p.topo.byUUID[muuid] = key
		if byGI[gi] != nil {
			continue // another compute instance of a GPU instance already read
		}
		u := &unit{key: key, mig: true, labels: []string{parent.labels[0], parent.labels[1], parent.labels[2], profile, giS}}
		byGI[gi] = u
		units = append(units, u)
		// NVML has no utilisation for MIG instances: say so.
		out = append(out, p.unsupported(u, schema.GPUUtilization.Name))
		if mem, ret := md.GetMemoryInfo(); r.ok("nvmlDeviceGetMemoryInfo", ret) {
			out = append(out, p.gauge(c.desc.memUsed, u, float64(mem.Used)), p.gauge(c.desc.memTotal, u, float64(mem.Total)))
		}
		if gpmOK {
			out = append(out, p.gpmRead(r, u, dev, gi)...)
		}
	}
	return units, out
}

// nodeDevices finds this poll's GPUs' device files: /dev/nvidia<minor>
// for each GPU, and for each MIG instance the access capability the
// driver's mig-minors table names. A file that is missing is reported
// once and its unit cannot be granted.
func (p *poll) nodeDevices() *nodeDevices {
	c := p.c
	n := &nodeDevices{whole: map[DevNum]unitKey{}, mig: map[DevNum]unitKey{}}
	lookup := c.o.Devices.Lookup
	if lookup == nil {
		lookup = charDevice
	}
	dev := func(path string) (DevNum, bool) {
		d, err := lookup(path)
		if err != nil {
			if !c.st.devReported[path] {
				c.st.devReported[path] = true
				c.countAlloc(reasonNoDeviceFile)
				c.o.Log.Warn("GPU device file unusable: its GPU cannot be found in any job's grant", "err", err)
			}
			return DevNum{}, false
		}
		return d, true
	}
	for minor, uuid := range p.topo.byMinor {
		if d, ok := dev(filepath.Join(c.o.Devices.Root, "nvidia"+strconv.Itoa(minor))); ok {
			n.whole[d] = unitKey{uuid, -1}
		}
	}
	if !p.topo.anyMIG {
		return n
	}
	mm, err := readMIGMinors(c.o.Devices.MIGMinors)
	if err != nil {
		if !c.st.devReported[c.o.Devices.MIGMinors] {
			c.st.devReported[c.o.Devices.MIGMinors] = true
			c.countAlloc(reasonNoDeviceFile)
			c.o.Log.Warn("no MIG capability table: no job can be found to hold a MIG instance", "err", err)
		}
		return n
	}
	for a, minor := range mm {
		uuid, ok := p.topo.byMinor[a.gpu]
		if !ok || !p.topo.units[unitKey{uuid, a.gi}] {
			continue
		}
		if d, ok := dev(filepath.Join(c.o.Devices.Root, "nvidia-caps", "nvidia-cap"+strconv.FormatUint(uint64(minor), 10))); ok {
			n.mig[d] = unitKey{uuid, a.gi}
		}
	}
	return n
}

// cstr returns the string before the first NUL of a C char array.
func cstr(b []int8) string {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	s := make([]byte, n)
	for i := range s {
		s[i] = byte(b[i])
	}
	return string(s)
}
