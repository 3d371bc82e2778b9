package gpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/jobinfo"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/schema"
)

// The per-process and per-job half of a poll: which job each GPU process
// belongs to, what it uses of each GPU or MIG instance, and what Slurm
// allocated each job.

// maxEnvReadsPerPoll bounds how many new tasks' environments one poll reads,
// so a node that just started thousands of processes costs a few polls, not
// one long one. Each task is read once in its life.
const maxEnvReadsPerPoll = 512

// valueNotAvailable is NVML's "unknown" for a process's memory.
const valueNotAvailable = ^uint64(0)

// use is what one job does on one unit.
type use struct {
	mem       uint64
	sm, memBW float64 // percent, summed over processes
}

type pidUtil struct {
	sm, mem float64
	n       int
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
			p.out = append(p.out, p.unsupported(u, schema.JobGPUUtilization.Name))
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

// allocations maps what Slurm gave each job (Grants) to this node's GPUs
// and MIG instances. The tasks' GPU variables, which their user sets, may
// only narrow it: units they name that Slurm granted are kept, and only
// those, when they name any; units Slurm did not grant are counted and
// ignored. A job no source knows the grant of holds nothing.
func (p *poll) allocations(ctx context.Context) map[string]map[unitKey]bool {
	c := p.c
	grants := map[string]map[unitKey]bool{}
	live := map[string]bool{}
	if c.o.Grants != nil {
		cands := p.devs.candidates()
		for id, j := range p.jobs {
			live[id] = true
			granted, _, ok, err := c.o.Grants.Grant(ctx, j, cands)
			if err != nil {
				c.grantError(err)
			}
			if !ok {
				if j.GRESPending {
					// Its first slurmctld lookup is late (a loaded node):
					// it holds nothing until it answers, and that is no
					// error yet.
					continue
				}
				if !c.st.noGrant[id] {
					c.st.noGrant[id] = true
					c.countAlloc(reasonNoGrant)
				}
				continue
			}
			grants[id] = p.devs.units(granted, p.topo.migEnabled)
		}
	}
	for id := range c.st.noGrant {
		if !live[id] {
			delete(c.st.noGrant, id)
		}
	}
	named := map[string]map[unitKey]bool{}
	livePIDs := map[int]bool{}
	reads := 0
	for id, tasks := range p.jobTasks {
		for _, t := range tasks {
			livePIDs[t.PID] = true
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
			fail := func(reason string) {
				if !e.reported {
					c.countAlloc(reason)
				}
			}
			p.topo.resolve(e.alloc, func(k unitKey) {
				if g, ok := grants[id]; !ok || !g[k] {
					fail(reasonOutsideGrant)
					return
				}
				if named[id] == nil {
					named[id] = map[unitKey]bool{}
				}
				named[id][k] = true
			}, fail)
			e.reported = true
		}
	}
	for pid := range c.st.env {
		if !livePIDs[pid] {
			delete(c.st.env, pid)
		}
	}
	for id, n := range named {
		if len(n) > 0 {
			grants[id] = n // a subset of the grant: only granted units were named
		}
	}
	return grants
}

// emitJobs writes the job series: every job's info, and for each GPU or
// MIG instance it is allocated or uses, its allocation and use. An
// allocated unit with no process shows zero use.
func (p *poll) emitJobs(ctx context.Context) {
	c := p.c
	alloc := p.allocations(ctx)
	ids := make([]string, 0, len(p.jobs))
	for id := range p.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		j := p.jobs[id]
		jid, user, name := cleanLabel(j.ID), cleanLabel(j.User), cleanLabel(j.Name)
		p.out = append(p.out, jobinfo.Metric(c.desc.jobInfo, j, cleanLabel))
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
