package gpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/jobinfo"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// maxEnvReadsPerPoll bounds how many new tasks' environments one poll reads,
// so a node that just started thousands of processes costs a few polls, not
// one long one. Each task is read once in its life.
const maxEnvReadsPerPoll = 512

// valueNotAvailable is NVML's "unknown" for a process's memory.
const valueNotAvailable = ^uint64(0)

// unit is a GPU or a MIG GPU instance as seen by this poll.
type unit struct {
	key      unitKey
	labels   []string // gpu_uuid, gpu_index, gpu_name[, gpu_mig_profile, gpu_mig_instance]
	mig      bool
	procUtil bool // NVML gives per-process utilisation here
}

// use is what one job does on one unit.
type use struct {
	mem       uint64
	sm, memBW float64 // percent, summed over processes
}

type pidUtil struct {
	sm, mem float64
	n       int
}

type poll struct {
	c   *Collector
	out []prometheus.Metric

	units map[unitKey]*unit
	topo  topology

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
	// GPM samples of instances that are gone (MIG reconfigured, GPU lost).
	for k, g := range p.c.st.gpm {
		if !p.seenGPM[k] {
			g.free()
			delete(p.c.st.gpm, k)
		}
	}
	if p.c.o.Jobs != nil {
		p.emitJobs()
	}
	return scanErr
}

// scanJobs lists the node's jobs and their tasks.
func (p *poll) scanJobs() error {
	procs, err := p.c.o.Jobs.Scan()
	if err != nil {
		return fmt.Errorf("listing processes: %w", err)
	}
	for _, pr := range procs {
		p.procs[pr.PID] = pr
		if !pr.InJob() {
			continue
		}
		p.jobs[pr.Job.ID] = pr.Job
		if !pr.Stepd { // slurmstepd carries slurmd's environment, not the job's
			p.jobTasks[pr.Job.ID] = append(p.jobTasks[pr.Job.ID], pr)
		}
	}
	return nil
}

// jobOf attributes a GPU process: from this poll's scan, or by resolving a
// process that started since.
func (p *poll) jobOf(pid int) *attribution.Job {
	pr, ok := p.procs[pid]
	if !ok {
		var err error
		if pr, err = p.c.o.Jobs.Resolve(pid); err != nil {
			return nil // exited, or not visible to us
		}
		p.procs[pid] = pr
	}
	if !pr.InJob() {
		return nil
	}
	if _, ok := p.jobs[pr.Job.ID]; !ok {
		p.jobs[pr.Job.ID] = pr.Job
	}
	return pr.Job
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
		emit(p.unsupported(u, ns+"gpu_utilization_ratio"))
		emit(p.unsupported(u, ns+"gpu_memory_utilization_ratio"))
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

	// GPM is asked once per GPU whether it is supported.
	gpmOK := false
	if c.gpm {
		ok, asked := c.st.gpmOK[uuid]
		if !asked {
			sup, ret := dev.GpmQueryDeviceSupport()
			ok = r.ok("nvmlGpmQueryDeviceSupport", ret) && sup.IsSupportedDevice != 0
			if ret == nvml.SUCCESS || ret == nvml.ERROR_NOT_SUPPORTED {
				c.st.gpmOK[uuid] = ok
			}
		}
		gpmOK = ok
	}
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
		out = append(out, p.unsupported(u, ns+"gpu_utilization_ratio"))
		if mem, ret := md.GetMemoryInfo(); r.ok("nvmlDeviceGetMemoryInfo", ret) {
			out = append(out, p.gauge(c.desc.memUsed, u, float64(mem.Used)), p.gauge(c.desc.memTotal, u, float64(mem.Total)))
		}
		if gpmOK {
			out = append(out, p.gpmRead(r, u, dev, gi)...)
		}
	}
	return units, out
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
			return []prometheus.Metric{p.unsupported(u, ns+"gpu_sm_active_ratio"),
				p.unsupported(u, ns+"gpu_sm_occupancy_ratio"), p.unsupported(u, ns+"gpu_tensor_active_ratio")}
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
			mg.Metrics[k].MetricId = uint32(id)
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

// processes reads the GPU's compute processes and their utilisation and
// adds each to its job's use of the GPU or MIG instance.
func (p *poll) processes(r *devReader, dev nvml.Device, u *unit, migs []*unit, migOn bool) {
	c := p.c
	if c.o.Jobs == nil {
		return
	}
	procs, ret := dev.GetComputeRunningProcesses()
	if !r.ok("nvmlDeviceGetComputeRunningProcesses_v3", ret) {
		return
	}
	// Per-process utilisation since the previous poll. NOT_FOUND means no
	// process ran since then.
	utils := map[int]*pidUtil{}
	last := c.st.lastSeen[u.key.uuid]
	samples, ret := dev.GetProcessUtilization(last)
	switch {
	case ret == nvml.SUCCESS:
		u.procUtil = true
		newest := last
		for _, s := range samples {
			if s.TimeStamp <= last {
				continue
			}
			newest = max(newest, s.TimeStamp)
			pu := utils[int(s.Pid)]
			if pu == nil {
				pu = &pidUtil{}
				utils[int(s.Pid)] = pu
			}
			pu.sm += float64(min(s.SmUtil, 100))
			pu.mem += float64(min(s.MemUtil, 100))
			pu.n++
		}
		c.st.lastSeen[u.key.uuid] = newest
	case ret == nvml.ERROR_NOT_FOUND:
		u.procUtil = true
	default:
		r.ok("nvmlDeviceGetProcessUtilization", ret)
		if ret == nvml.ERROR_NOT_SUPPORTED && !migOn {
			p.out = append(p.out, p.unsupported(u, ns+"job_gpu_utilization_ratio"))
		}
	}
	if r.lost {
		return
	}
	byGI := map[int]*unit{}
	for _, m := range migs {
		byGI[m.key.gi] = m
	}
	for _, pr := range procs {
		target := u
		if migOn && pr.GpuInstanceId != noInstance {
			if m := byGI[int(pr.GpuInstanceId)]; m != nil {
				target = m
			}
		}
		job := p.jobOf(int(pr.Pid))
		if job == nil {
			continue
		}
		us := p.useOf(job.ID, target.key)
		if pr.UsedGpuMemory != valueNotAvailable {
			us.mem += pr.UsedGpuMemory
		}
		if pu := utils[int(pr.Pid)]; pu != nil && target == u {
			us.sm += pu.sm / float64(pu.n)
			us.memBW += pu.mem / float64(pu.n)
			delete(utils, int(pr.Pid))
		}
	}
	// Utilisation samples of processes not in the compute list (graphics
	// contexts) still count for their job.
	for pid, pu := range utils {
		if job := p.jobOf(pid); job != nil {
			us := p.useOf(job.ID, u.key)
			us.sm += pu.sm / float64(pu.n)
			us.memBW += pu.mem / float64(pu.n)
		}
	}
}

func (p *poll) useOf(job string, k unitKey) *use {
	m := p.uses[job]
	if m == nil {
		m = map[unitKey]*use{}
		p.uses[job] = m
	}
	us := m[k]
	if us == nil {
		us = &use{}
		m[k] = us
	}
	return us
}

// allocations reads (or recalls) each task's GPU variables and maps them to
// this node's GPUs and MIG instances.
func (p *poll) allocations() map[string]map[unitKey]bool {
	c := p.c
	out := map[string]map[unitKey]bool{}
	live := map[int]bool{}
	reads := 0
	for id, tasks := range p.jobTasks {
		for _, t := range tasks {
			live[t.PID] = true
			e := c.st.env[t.PID]
			if e == nil || e.start != t.Start {
				if reads >= maxEnvReadsPerPoll {
					continue
				}
				reads++
				env, err := c.o.Proc.Environ(t.PID, EnvKeys...)
				if err != nil {
					if errors.Is(err, procfs.ErrGone) {
						continue
					}
					env = nil // unreadable: the task says nothing
				}
				e = &envEntry{start: t.Start, alloc: parseTaskEnv(env)}
				c.st.env[t.PID] = e
			}
			p.topo.resolve(e.alloc, func(k unitKey) {
				if out[id] == nil {
					out[id] = map[unitKey]bool{}
				}
				out[id][k] = true
			}, func(reason string) {
				if !e.reported {
					c.countAlloc(reason)
				}
			})
			e.reported = true
		}
	}
	for pid := range c.st.env {
		if !live[pid] {
			delete(c.st.env, pid)
		}
	}
	return out
}

// emitJobs writes the job series: every job's info, and for each GPU or
// MIG instance it is allocated or uses, its allocation and use. An
// allocated unit with no process shows zero use.
func (p *poll) emitJobs() {
	c := p.c
	alloc := p.allocations()
	ids := make([]string, 0, len(p.jobs))
	for id := range p.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		j := p.jobs[id]
		jid, user, name := cleanLabel(j.ID), cleanLabel(j.User), cleanLabel(j.Name)
		p.out = append(p.out, jobinfo.Metric(c.desc.jobInfo, jid, name, user, cleanLabel(j.Account), cleanLabel(j.Partition)))
		keys := make([]unitKey, 0, len(alloc[id])+len(p.uses[id]))
		for k := range alloc[id] {
			keys = append(keys, k)
		}
		for k := range p.uses[id] {
			if !alloc[id][k] {
				keys = append(keys, k)
			}
		}
		slices.SortFunc(keys, func(a, b unitKey) int {
			return cmp.Or(cmp.Compare(a.uuid, b.uuid), cmp.Compare(a.gi, b.gi))
		})
		for _, k := range keys {
			u := p.units[k]
			if u == nil {
				continue // lost this poll, or gone
			}
			lv := append([]string{jid, user, name}, u.labels...)
			d := func(f family) *prometheus.Desc {
				if u.mig {
					return f.mig
				}
				return f.gpu
			}
			us := p.uses[id][k]
			if us == nil {
				us = &use{}
			}
			if alloc[id][k] {
				p.out = append(p.out, prometheus.MustNewConstMetric(d(c.desc.jobAlloc), prometheus.GaugeValue, 1, lv...))
			}
			p.out = append(p.out, prometheus.MustNewConstMetric(d(c.desc.jobMemUsed), prometheus.GaugeValue, float64(us.mem), lv...))
			if u.procUtil {
				p.out = append(p.out,
					prometheus.MustNewConstMetric(d(c.desc.jobUtil), prometheus.GaugeValue, us.sm/100, lv...),
					prometheus.MustNewConstMetric(d(c.desc.jobMemUtil), prometheus.GaugeValue, us.memBW/100, lv...))
			}
		}
	}
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
